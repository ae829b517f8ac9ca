package cli

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// demo --serve beyond loopback takes serve's --token-file, --tls-cert,
// --tls-key and --insecure-http, and refuses a bad combination before the
// demo runs: no report, no database.
func TestDemoServeChecksTheListenerFirst(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("demo-admin-token-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, _, _ := selfSigned(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--addr", "0.0.0.0:0"}, []string{"IDEM_ADMIN_TOKEN", "--token-file"}},
		{[]string{"--addr", "0.0.0.0:0", "--token-file", tokenFile}, []string{"--tls-cert", "--insecure-http"}},
		{[]string{"--addr", "127.0.0.1:0", "--tls-cert", certFile}, []string{"--tls-key"}},
		{[]string{"--addr", "nonsense"}, []string{"--addr"}},
	} {
		db := filepath.Join(t.TempDir(), "demo.db")
		args := append([]string{"demo", "--serve", "--db", db, "--searches", "20", "--kills", "0", "--progress=false"}, tc.args...)
		code, out, errOut := run(t, args...)
		if code != 2 || out != "" {
			t.Errorf("%q: exit %d, stdout %q; want 2 and no report", tc.args, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%q: stderr %q does not name %s", tc.args, errOut, w)
			}
		}
		if _, err := os.Stat(db); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%q: the demo ran before the refusal (%s: %v)", tc.args, db, err)
		}
	}
}

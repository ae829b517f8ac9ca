package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

// sagas ls --attr keeps the instances whose attributes all match, in any
// Unicode spelling of the value, and refuses a malformed filter as usage.
func TestSagasLsAttr(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	url := "sqlite://" + path
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	mk := func(k string, attrs map[string]string) *store.Instance {
		return &store.Instance{SagaType: "po", Key: k, State: "Open", Data: []byte(`{}`), SchemaVersion: 1, Version: 1, CreatedAt: now, UpdatedAt: now, Attributes: attrs}
	}
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &store.Changes{Inserts: []*store.Instance{
		mk("po-1", map[string]string{"supplier": "M\u00fcller", "region": "eu"}),
		mk("po-2", map[string]string{"supplier": "M\u00fcller", "region": "us"}),
		mk("po-3", map[string]string{"supplier": "acme", "region": "eu"}),
	}}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	keys := func(args ...string) []string {
		t.Helper()
		code, out, errOut := run(t, append([]string{"sagas", "ls", "--store", url, "--json"}, args...)...)
		var list []instanceJSON
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
			t.Fatalf("sagas ls %v: exit %d, out %q, err %q", args, code, out, errOut)
		}
		var ks []string
		for _, in := range list {
			ks = append(ks, in.Key)
		}
		return ks
	}
	if got := keys("--attr", "supplier=Mu\u0308ller"); strings.Join(got, ",") != "po-1,po-2" {
		t.Errorf("--attr supplier=Müller (NFD): got %v, want po-1 and po-2", got)
	}
	if got := keys("--attr", "supplier=M\u00fcller", "--attr", "region=eu"); strings.Join(got, ",") != "po-1" {
		t.Errorf("two --attr: got %v, want po-1", got)
	}
	code, out, _ := run(t, "sagas", "ls", "--store", url, "--attr", "region=eu")
	if code != 0 || !strings.Contains(out, "ATTRIBUTES") || !strings.Contains(out, `supplier="acme"`) || strings.Contains(out, "po-2") {
		t.Errorf("sagas ls --attr region=eu: exit %d, out %q; want po-1 and po-3 with their attributes", code, out)
	}
	code, out, _ = run(t, "sagas", "show", "po", "po-3", "--store", url)
	if code != 0 || !regexp.MustCompile(`\nAttributes: +region="eu" supplier="acme"\n`).MatchString(out) {
		t.Errorf("sagas show: exit %d, out %q; want the attributes", code, out)
	}
	for _, bad := range []string{"supplier", "=x", "supplier=a\x00b", "region=eu\xff", "supplier="} {
		code, _, errOut := run(t, "sagas", "ls", "--store", url, "--attr", bad)
		if code != 2 || !strings.Contains(errOut, "--attr") {
			t.Errorf("--attr %q: exit %d, err %q; want usage error 2 naming --attr", bad, code, errOut)
		}
	}
	code, _, errOut := run(t, "sagas", "ls", "--store", url, "--attr", "region=eu", "--attr", "region=us")
	if code != 2 || !strings.Contains(errOut, "ANDed") {
		t.Errorf("conflicting --attr: exit %d, err %q; want usage error 2", code, errOut)
	}
}

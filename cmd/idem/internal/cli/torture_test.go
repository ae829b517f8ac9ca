package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestTortureRefusesMemoryStore(t *testing.T) {
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"torture", "--store", "memory", "--duration", "1s"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "cannot be shared by worker processes") {
		t.Fatalf("exit %d, stderr %q: want 2 and the reason", code, errb.String())
	}
}

// --faults failover without --patroni stops at once saying what to give,
// rather than running without the failovers asked for.
func TestTortureFailoverFlags(t *testing.T) {
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"torture", "--store", "postgres://u@127.0.0.1:1/db", "--faults", "kill,failover", "--duration", "1s"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "--faults failover needs --patroni") {
		t.Fatalf("exit %d, stderr %q: want 2 and --patroni named", code, errb.String())
	}
	errb.Reset()
	code = Run(context.Background(), []string{"torture", "--store", "sqlite", "--faults", "failover", "--patroni", "http://127.0.0.1:1", "--duration", "1s"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "postgres:// --store") {
		t.Fatalf("exit %d, stderr %q: want 2 and the store named", code, errb.String())
	}
}

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

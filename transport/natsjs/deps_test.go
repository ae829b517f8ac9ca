package natsjs_test

import (
	"os/exec"
	"strings"
	"testing"
)

// A program that connects natsjs to an external server must not compile
// nats-server: only transport/natsjs/natsembed imports it.
func TestDoesNotImportNATSServer(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH:", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "github.com/idemhq/idem/transport/natsjs").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var found []string
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/nats-io/nats-server/") {
			found = append(found, p)
		}
	}
	if len(found) > 0 {
		t.Fatalf("transport/natsjs depends on %d nats-server packages, first %s; only transport/natsjs/natsembed may import nats-server", len(found), found[0])
	}
	if !strings.Contains(string(out), "github.com/nats-io/nats.go/jetstream\n") {
		t.Fatalf("go list -deps of transport/natsjs lacks nats.go's jetstream package; is the check looking at the right package?\n%s", out)
	}
}

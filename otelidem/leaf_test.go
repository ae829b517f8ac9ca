package otelidem_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The core and the stores compile nothing of OpenTelemetry: only programs
// that import otelidem do.
func TestLeaf(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	deps := func(pkgs ...string) []string {
		t.Helper()
		out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %v: %v\n%s", pkgs, err, out)
		}
		return strings.Fields(string(out))
	}
	otel := func(list []string) []string {
		var out []string
		for _, p := range list {
			if strings.HasPrefix(p, "go.opentelemetry.io/") {
				out = append(out, p)
			}
		}
		return out
	}
	for _, pkgs := range [][]string{
		{"github.com/idemhq/idem"},
		{"github.com/idemhq/idem/store/..."},
		{"github.com/idemhq/idem/transport/..."},
		{"github.com/idemhq/idem/admin"},
	} {
		if got := otel(deps(pkgs...)); len(got) > 0 {
			t.Errorf("%v depends on OpenTelemetry: %v", pkgs, got)
		}
	}
	// The check itself sees OpenTelemetry where it is.
	if got := otel(deps("github.com/idemhq/idem/otelidem")); len(got) == 0 {
		t.Error("go list -deps found no OpenTelemetry package under otelidem: the check is broken")
	}
}

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

// A program that imports the core carries no OpenTelemetry SDK, gRPC or CLI
// library in its module graph, so the core sets no minimum version for
// them: otelidem and cmd/idem are modules of their own (docs/architecture.md,
// "Modules").
func TestCoreModuleGraph(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	cmd := exec.Command("go", "list", "-m", "all")
	cmd.Dir = ".." // the core module, outside the workspace of go.work
	cmd.Env = append(cmd.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m all in the core module: %v\n%s", err, out)
	}
	mods := string(out)
	if !strings.HasPrefix(mods, "github.com/idemhq/idem\n") || !strings.Contains(mods, "\nmodernc.org/sqlite ") {
		t.Fatalf("go list -m all did not list the core module's graph; is the check looking at the right module?\n%s", mods)
	}
	for _, heavy := range []string{"go.opentelemetry.io/", "google.golang.org/grpc ", "github.com/spf13/cobra "} {
		if strings.Contains(mods, "\n"+heavy) {
			t.Errorf("the core module's graph holds %s; only otelidem and cmd/idem may require it", strings.TrimSpace(heavy))
		}
	}
}

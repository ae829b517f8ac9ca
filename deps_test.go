package idem_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The engine records states at each step and never diffs them: the diff
// library (jsondiff and the tidwall packages under it) is linked only by
// the readers of a history (internal/history, for admin and the CLI), not
// by a program that imports the engine.
func TestEngineDoesNotLinkDiffLibrary(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH:", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "github.com/idemhq/idem").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/idemhq/idem/internal/journal") {
		t.Fatalf("go list -deps of the engine lacks internal/journal; is the check looking at the right package?\n%s", out)
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "github.com/wI2L/jsondiff") || strings.HasPrefix(p, "github.com/tidwall/") || p == "github.com/idemhq/idem/internal/history" {
			t.Errorf("the engine links %s; find the importer with: go list -deps -f '{{.ImportPath}}: {{.Imports}}' github.com/idemhq/idem", p)
		}
	}
}

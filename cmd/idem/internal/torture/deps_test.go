package torture

import (
	"os/exec"
	"strings"
	"testing"
)

// The idem binary runs this package (idem torture) and must not link
// package testing: the counter saga it runs is in internal/countersaga,
// not in the test support of internal/enginetest.
func TestIdemBinaryDoesNotLinkTesting(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH:", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "github.com/idemhq/idem/cmd/idem").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	has := func(pkg string) bool {
		for _, p := range deps {
			if p == pkg {
				return true
			}
		}
		return false
	}
	if !has("github.com/idemhq/idem/cmd/idem/internal/torture") {
		t.Fatalf("go list -deps of cmd/idem lacks cmd/idem/internal/torture; is the check looking at the right package?\n%s", out)
	}
	for _, pkg := range []string{"testing", "github.com/idemhq/idem/internal/enginetest"} {
		if has(pkg) {
			t.Errorf("the idem binary links %s; find the importer with: go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/idem", pkg)
		}
	}
}

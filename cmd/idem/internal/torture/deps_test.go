package torture

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The idem binary runs this package (idem torture) and must not link
// package testing: the counter saga it runs is in internal/countersaga,
// not in the test support of internal/enginetest.
func TestIdemBinaryDoesNotLinkTesting(t *testing.T) {
	deps := idemDeps(t)
	for _, pkg := range []string{"testing", "github.com/idemhq/idem/internal/enginetest"} {
		if slices.Contains(deps, pkg) {
			t.Errorf("the idem binary links %s; find the importer with: go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/idem", pkg)
		}
	}
}

// The examples are for users to read: the idem binary (its demo, serve and
// torture) runs its own copies of the sagas it needs, in
// cmd/idem/internal/demo, so that editing an example cannot change what
// the programs do.
func TestIdemBinaryImportsNoExample(t *testing.T) {
	for _, pkg := range idemDeps(t) {
		if strings.HasPrefix(pkg, "github.com/idemhq/idem/examples/") {
			t.Errorf("the idem binary links the example %s; find the importer with: go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/idem", pkg)
		}
	}
}

// idemDeps returns go list -deps of the idem command, checked to include
// this package so that a wrong package path cannot pass the tests above.
func idemDeps(t *testing.T) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH:", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "github.com/idemhq/idem/cmd/idem").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/idemhq/idem/cmd/idem/internal/torture") {
		t.Fatalf("go list -deps of cmd/idem lacks cmd/idem/internal/torture; is the check looking at the right package?\n%s", out)
	}
	return deps
}

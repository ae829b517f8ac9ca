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

// demoExamples are the examples whose sagas the idem binary runs (idem
// demo, serve and torture): they have one home, which users read, and the
// binary imports them. No other example may be linked into the binary,
// and none of these may bring package testing (TestIdemBinaryDoesNotLinkTesting).
// scripts/test checks the same list.
var demoExamples = []string{
	"github.com/idemhq/idem/examples/orders",
	"github.com/idemhq/idem/examples/searchimport",
}

func TestIdemBinaryLinksOnlyTheDemoExamples(t *testing.T) {
	deps := idemDeps(t)
	for _, pkg := range deps {
		if strings.HasPrefix(pkg, "github.com/idemhq/idem/examples/") && !slices.Contains(demoExamples, pkg) {
			t.Errorf("the idem binary links the example %s, which is not one of the demo's (%v); find the importer with: go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/idem", pkg, demoExamples)
		}
	}
	if !slices.Contains(deps, "github.com/idemhq/idem/examples/searchimport") {
		t.Errorf("the idem binary does not link examples/searchimport, the demo's saga; is the check looking at the right package?")
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

package kafka_test

import (
	"os/exec"
	"strings"
	"testing"
)

// franz-go stays out of the core module's graph: transport/kafka is a
// module of its own (docs/architecture.md, "Modules"), so that a program on
// the core does not get franz-go's requirements.
func TestCoreModuleGraphHasNoFranzGo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	cmd := exec.Command("go", "list", "-m", "all")
	cmd.Dir = "../.." // the core module, outside the workspace of go.work
	cmd.Env = append(cmd.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m all in the core module: %v\n%s", err, out)
	}
	mods := string(out)
	if !strings.HasPrefix(mods, "github.com/idemhq/idem\n") {
		t.Fatalf("go list -m all did not list the core module's graph; is the check looking at the right module?\n%s", mods)
	}
	for _, heavy := range []string{"github.com/twmb/franz-go ", "github.com/twmb/franz-go/pkg/kfake ", "github.com/pierrec/lz4/"} {
		if strings.Contains(mods, "\n"+heavy) {
			t.Errorf("the core module's graph holds %s; only transport/kafka may require it", strings.TrimSpace(heavy))
		}
	}
}

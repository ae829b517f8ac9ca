package torture

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A restart command that never returns (here one whose child keeps the
// output pipe open) fails the run, naming the flag and the command,
// instead of hanging it; one that fails says so.
func TestRestartCmdTimesOut(t *testing.T) {
	old := restartTimeout
	restartTimeout = 300 * time.Millisecond
	t.Cleanup(func() { restartTimeout = old })
	err := runRestartCmd(context.Background(), "--broker-restart-cmd", "sleep 600 & sleep 600")
	if err == nil || !strings.Contains(err.Error(), "--broker-restart-cmd did not finish") || !strings.Contains(err.Error(), "sleep 600") {
		t.Fatalf("a hung restart command: %v; want a timeout naming the flag and the command", err)
	}
	err = runRestartCmd(context.Background(), "--pg-restart-cmd", "echo no server; exit 3")
	if err == nil || !strings.Contains(err.Error(), "--pg-restart-cmd failed") || !strings.Contains(err.Error(), "no server") {
		t.Fatalf("a failing restart command: %v; want its failure and output", err)
	}
	if err := runRestartCmd(context.Background(), "--pg-restart-cmd", "true"); err != nil {
		t.Fatalf("a restart command that succeeds: %v", err)
	}
}

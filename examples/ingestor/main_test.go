package main

import (
	"bytes"
	"strings"
	"testing"
)

// The console replays and purges: beyond the loopback interface the
// ingestor refuses to serve it without a token, and says what to do.
func TestConsoleNeedsTokenBeyondLoopback(t *testing.T) {
	var stderr bytes.Buffer
	code := run([]string{"api", "--db", t.TempDir() + "/ingestor.db", "--addr", "0.0.0.0:0"}, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "--console-token") {
		t.Fatalf("exit %d, stderr %q: want 2 and a hint to set --console-token", code, stderr.String())
	}
	for _, addr := range []string{"127.0.0.1:8080", "[::1]:8080", "localhost:8080"} {
		if !loopback(addr) {
			t.Errorf("loopback(%q) = false", addr)
		}
	}
	if loopback(":8080") {
		t.Error(`loopback(":8080") = true: it listens on every interface`)
	}
}

package natsjs_test

import (
	"os"
	"testing"
)

// TestMain shuts down the shared embedded server after the tests, and
// doubles as the worker process of the multi-process test.
func TestMain(m *testing.M) {
	if os.Getenv("IDEM_NATS_WORKER_URL") != "" {
		os.Exit(runWorker())
	}
	code := m.Run()
	stopShared()
	os.Exit(code)
}

func runWorker() int { return 2 }

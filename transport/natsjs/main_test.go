package natsjs_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
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

// runWorker is a worker process: the counter engine on PostgreSQL (schema
// IDEM_PG_WORKER_SCHEMA) with the NATS transport of the test's embedded
// server (IDEM_NATS_WORKER_URL, stream IDEM_NATS_WORKER_STREAM).
func runWorker() int {
	return enginetest.RunWorkerOn(func(ctx context.Context) (store.Store, transport.Transport, error) {
		st, err := pgstore.Open(ctx, os.Getenv("IDEM_TEST_PG_URL"), &pgstore.Config{Schema: os.Getenv("IDEM_PG_WORKER_SCHEMA"), MaxConns: 8})
		if err != nil {
			return nil, nil, err
		}
		// A worker started while the test restarts the broker waits for it,
		// as a process supervisor would restart it: Open itself refuses an
		// unreachable server.
		var tr *natsjs.Transport
		deadline := time.Now().Add(30 * time.Second)
		for {
			tr, err = natsjs.Open(ctx, os.Getenv("IDEM_NATS_WORKER_URL"), &natsjs.Config{Stream: os.Getenv("IDEM_NATS_WORKER_STREAM"), AckWait: workerAckWait, ConnectTimeout: time.Second})
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond) // polling for the broker to come back, with a deadline
		}
		if err != nil {
			_ = st.Close()
			return nil, nil, err
		}
		return st, tr, nil
	})
}

// workerAckWait is the visibility timeout of the engine tests: short, so
// that the deliveries of a killed worker come back quickly.
const workerAckWait = 2 * time.Second

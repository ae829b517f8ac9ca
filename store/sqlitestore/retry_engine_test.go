package sqlitestore_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

type (
	flaky      struct{ Done bool }
	flakyStart struct{ ID string }
)

// On SQLite as its own queue (the engine claims the message inside the
// unit of work, and returns it there), a message that fails once shows
// its retry state before its second delivery, and none after it succeeds.
func TestEngineRecordsRetryStateOnOwnQueue(t *testing.T) {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{Logger: quiet, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	k := store.Key{SagaType: "flaky", Key: "f-1"}
	var mu sync.Mutex
	var calls int
	var before []store.Retry
	m := saga.New[flaky]("flaky")
	done := m.Final("Done")
	start := saga.NewEvent[flakyStart](m, func(e flakyStart) string { return e.ID })
	m.Initially(saga.When(start).Then(func(c *saga.Context[flaky], _ flakyStart) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return idem.RetryAfter(20*time.Millisecond, errors.New("upstream: 503"))
		}
		rs, rerr := st.Retries(ctx, k)
		before, c.Data.Done = rs, true
		return rerr
	}).TransitionTo(done))
	e, err := idem.NewEngine(st, st, &idem.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(m); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	env, err := e.NewEnvelope("start-f-1", flakyStart{ID: "f-1"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := e.PublishAndWait(wctx, env); err != nil {
		t.Fatalf("apply start-f-1: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 2 || len(before) != 1 {
		t.Fatalf("handler ran %d times and saw retries %+v before the second; want 2 runs and one retry", calls, before)
	}
	if r := before[0]; r.ID != "start-f-1" || r.Attempts != 1 || r.Error == "" || !r.NextAttemptAt.After(r.LastFailedAt) {
		t.Errorf("retry before the second delivery: %+v; want start-f-1, attempt 1, its error, a next attempt after the failure", r)
	}
	rs, err := st.QueryRetries(ctx, &store.RetryQuery{})
	if err != nil || len(rs) != 0 {
		t.Errorf("after success: retries %+v, error %v; want none", rs, err)
	}
}

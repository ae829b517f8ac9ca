package idem_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

func TestErrorHelpers(t *testing.T) {
	t.Parallel()
	cause := errors.New("cause")
	if idem.Permanent(nil) != nil || idem.RetryAfter(time.Second, nil) != nil {
		t.Error("Permanent(nil) and RetryAfter(d, nil) must be nil")
	}
	p := idem.Permanent(cause)
	if !idem.IsPermanent(p) || !errors.Is(p, cause) {
		t.Errorf("Permanent(cause) = %v: IsPermanent %v, Is(cause) %v; want both true", p, idem.IsPermanent(p), errors.Is(p, cause))
	}
	if wrapped := fmt.Errorf("charge card: %w", p); !idem.IsPermanent(wrapped) {
		t.Error("IsPermanent must see a wrapped Permanent")
	}
	if idem.IsPermanent(cause) || idem.IsPermanent(idem.RetryAfter(time.Second, cause)) {
		t.Error("a plain or RetryAfter error is not permanent")
	}
	if r := idem.RetryAfter(time.Minute, cause); !errors.Is(r, cause) || !strings.Contains(r.Error(), "cause") {
		t.Errorf("RetryAfter(cause) = %v: must wrap and mention the cause", r)
	}
}

// failingCounter returns a counter machine whose Inc for key fails with
// what fail returns for the n-th call (1-based), and the call count.
func failingCounter(key string, fail func(n int64) error) (*saga.Machine[Counter], *atomic.Int64) {
	calls := &atomic.Int64{}
	m := newCounter(&counterOpts{onInc: func(c *saga.Context[Counter], e Inc) error {
		if c.Key() != key {
			return nil
		}
		return fail(calls.Add(1))
	}})
	return m, calls
}

func TestPermanentErrorDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	m, calls := failingCounter("perm", func(int64) error {
		return idem.Permanent(errors.New("card declined: cause-42"))
	})
	b := setup(t, &options{machine: m})
	b.send("inc-perm", Inc{Key: "perm", N: 1})
	b.settle()
	b.stop()
	dls := b.deadLetters()
	if len(dls) != 1 {
		t.Fatalf("got %d dead letters, want 1: %+v", len(dls), dls)
	}
	dl := dls[0]
	if dl.Reason != idem.ReasonPermanent || dl.Attempts != 1 || !strings.Contains(dl.Error, "cause-42") {
		t.Errorf("dead letter reason %q, attempts %d, error %q: want %s, 1, containing cause-42", dl.Reason, dl.Attempts, dl.Error, idem.ReasonPermanent)
	}
	if dl.Envelope.ID != "inc-perm" || dl.SagaType != counterType || dl.Key != "perm" {
		t.Errorf("dead letter %+v: want envelope inc-perm for counter/perm", dl)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("handler ran %d times, want 1", got)
	}
	if s := b.stats(); s.Retries != 0 || s.DeadLettered != 1 {
		t.Errorf("stats %+v: want Retries 0, DeadLettered 1", s)
	}
	if in := b.instance("perm"); in != nil {
		t.Errorf("a failed first message created saga %+v", in)
	}
}

// A panicking saga handler is contained and treated as permanent.
func TestSagaHandlerPanicIsPermanent(t *testing.T) {
	t.Parallel()
	m, _ := failingCounter("boom", func(int64) error { panic("kaboom") })
	b := setup(t, &options{machine: m})
	b.send("inc-boom", Inc{Key: "boom", N: 1})
	b.send("inc-ok", Inc{Key: "ok", N: 1})
	b.settle()
	dls := b.deadLetters()
	if len(dls) != 1 || dls[0].Reason != idem.ReasonPermanent || !strings.Contains(dls[0].Error, "kaboom") {
		t.Fatalf("got dead letters %+v, want inc-boom as %s mentioning the panic", dls, idem.ReasonPermanent)
	}
	if c, _ := b.counter("ok"); c.Total != 1 {
		t.Errorf("other key: total %d, want 1", c.Total)
	}
}

func TestTransientErrorRetriedThenAppliedOnce(t *testing.T) {
	t.Parallel()
	const failures = 3
	m, calls := failingCounter("flaky", func(n int64) error {
		if n <= failures {
			return fmt.Errorf("service unavailable (call %d)", n)
		}
		return nil
	})
	b := setup(t, &options{machine: m, cfg: idem.Config{MaxAttempts: 10, RetryBase: time.Millisecond, RetryMax: 4 * time.Millisecond}})
	b.send("inc-flaky", Inc{Key: "flaky", N: 7})
	b.settle()
	b.stop()
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Fatalf("got dead letters %+v, want none", dls)
	}
	c, _ := b.counter("flaky")
	if c.Total != 7 || c.Incs != 1 {
		t.Errorf("got total %d after %d incs, want 7 after 1", c.Total, c.Incs)
	}
	if got := calls.Load(); got != failures+1 {
		t.Errorf("handler ran %d times, want %d", got, failures+1)
	}
	if j := b.journal("flaky"); len(j) != 1 {
		t.Errorf("journal has %d entries, want 1", len(j))
	}
	if ids := b.rec.distinctIDs(incrementedType); len(ids) != 1 {
		t.Errorf("Incremented emitted with %d distinct IDs, want 1", len(ids))
	}
	if s := b.stats(); s.Retries < failures {
		t.Errorf("stats %+v: want Retries >= %d", s, failures)
	}
	nacks := b.rec.nacked()
	if len(nacks) != failures {
		t.Fatalf("got %d nacks, want %d", len(nacks), failures)
	}
	for i, n := range nacks {
		if n.attempt != i+1 || n.delay < 0 || n.delay > 4*time.Millisecond {
			t.Errorf("nack %d: attempt %d delay %s; want attempt %d, delay within [0, RetryMax]", i, n.attempt, n.delay, i+1)
		}
	}
}

func TestTransientErrorExhaustsRetries(t *testing.T) {
	t.Parallel()
	m, calls := failingCounter("down", func(n int64) error { return fmt.Errorf("still down (call %d)", n) })
	b := setup(t, &options{machine: m, cfg: idem.Config{MaxAttempts: 3, RetryBase: time.Millisecond, RetryMax: 2 * time.Millisecond}})
	b.send("inc-down", Inc{Key: "down", N: 1})
	b.settle()
	b.stop()
	dls := b.deadLetters()
	if len(dls) != 1 {
		t.Fatalf("got %d dead letters, want 1", len(dls))
	}
	if dl := dls[0]; dl.Reason != idem.ReasonRetriesExhausted || dl.Attempts != 3 || !strings.Contains(dl.Error, "still down") {
		t.Errorf("dead letter reason %q attempts %d error %q: want %s, 3, the cause", dl.Reason, dl.Attempts, dl.Error, idem.ReasonRetriesExhausted)
	}
	if got := calls.Load(); got != 3 {
		t.Errorf("handler ran %d times, want MaxAttempts = 3", got)
	}
	if s := b.stats(); s.Retries != 2 || s.DeadLettered != 1 {
		t.Errorf("stats %+v: want Retries 2, DeadLettered 1", s)
	}
}

// RetryAfter's delay reaches the transport; with an hour the message is not
// redelivered while the engine keeps processing other messages.
func TestRetryAfterHonoursDelay(t *testing.T) {
	t.Parallel()
	m, calls := failingCounter("later", func(int64) error {
		return idem.RetryAfter(time.Hour, errors.New("rate limited"))
	})
	b := setup(t, &options{machine: m, cfg: idem.Config{MaxAttempts: 5}})
	b.send("inc-later", Inc{Key: "later", N: 1})
	eventually(t, func() bool { return len(b.rec.nacked()) == 1 })
	if n := b.rec.nacked()[0]; n.delay != time.Hour || n.id != "inc-later" {
		t.Errorf("nack %+v: want inc-later with delay 1h", n)
	}
	// A later message for another key goes all the way through…
	b.send("inc-other", Inc{Key: "other", N: 1})
	eventually(t, func() bool { return b.instance("other") != nil && b.mem.Unsettled() == 1 })
	// …while the rate-limited one waits.
	if got := calls.Load(); got != 1 {
		t.Errorf("handler ran %d times, want 1", got)
	}
	if p, st := b.mem.Unsettled(), b.mem.Stats(); p != 1 || st.Delayed != 1 {
		t.Errorf("pending %d, delayed %d: want 1, 1", p, st.Delayed)
	}
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Errorf("got dead letters %+v, want none", dls)
	}
}

// A dead letter replayed after the cause was fixed is applied with its
// original ID.
func TestReplayDeadLetter(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	m, _ := failingCounter("fixme", func(int64) error {
		if broken.Load() {
			return idem.Permanent(errors.New("bad config"))
		}
		return nil
	})
	b := setup(t, &options{machine: m})
	b.send("inc-fixme", Inc{Key: "fixme", N: 2})
	b.settle()
	dls := b.deadLetters()
	if len(dls) != 1 {
		t.Fatalf("got %d dead letters, want 1", len(dls))
	}
	broken.Store(false)
	if err := b.engine().ReplayDeadLetter(b.ctx, dls[0].ID); err != nil {
		t.Fatalf("ReplayDeadLetter: %v", err)
	}
	b.settle()
	if c, _ := b.counter("fixme"); c.Total != 2 {
		t.Errorf("got total %d, want 2", c.Total)
	}
	// The dead letter stays, with its history: the replay succeeded.
	if dls := b.deadLetters(); len(dls) != 1 || len(dls[0].Replays) != 1 || dls[0].Replays[0].Outcome != store.ReplaySucceeded {
		t.Errorf("after a replay that was applied: dead letters %+v, want the one, its replay succeeded", dls)
	}
	if j := b.journal("fixme"); len(j) != 1 || j[0].MessageID != "inc-fixme" {
		t.Errorf("journal %+v: want one entry for inc-fixme", j)
	}
	if err := b.engine().ReplayDeadLetter(b.ctx, "no-such-id"); err == nil {
		t.Error("ReplayDeadLetter of an unknown ID: got nil error")
	}
}

// ---------------------------------------------------------------------------
// Plain handlers (Engine.Handle).
// ---------------------------------------------------------------------------

const auditType = "audit.Recorded"

func auditEnv(id string) idem.Envelope {
	return idem.Envelope{ID: id, Type: auditType, Body: []byte(`{"what":"` + id + `"}`)}
}

func TestHandleRunsOncePerMessageID(t *testing.T) {
	t.Parallel()
	var calls callCounter
	b := setup(t, &options{
		mem: memTransportConfig(2),
		handlers: map[string]idem.HandlerFunc{auditType: func(_ context.Context, env idem.Envelope) error {
			calls.inc(env.ID)
			return nil
		}},
	})
	const n = 30
	for i := range n {
		env := auditEnv(fmt.Sprintf("audit-%d", i))
		b.publish(env, env) // published twice, and the transport duplicates each
	}
	b.settle()
	b.stop()
	for i := range n {
		id := fmt.Sprintf("audit-%d", i)
		if got := calls.get(id); got != 1 {
			t.Errorf("handler ran %d times for %s, want 1", got, id)
		}
	}
	if s := b.stats(); s.Applied != n || s.Duplicates != 5*n {
		t.Errorf("stats %+v: want Applied %d, Duplicates %d", s, n, 5*n)
	}
}

func TestHandleErrorClasses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		fail       func(n int) error
		wantCalls  int
		wantReason string // "" means handled
	}{
		{"permanent", func(int) error { return idem.Permanent(errors.New("no such account")) }, 1, idem.ReasonPermanent},
		{"transient then ok", func(n int) error {
			if n < 3 {
				return errors.New("timeout")
			}
			return nil
		}, 3, ""},
		{"always transient", func(int) error { return errors.New("timeout") }, 4, idem.ReasonRetriesExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			b := setup(t, &options{
				cfg: idem.Config{MaxAttempts: 4},
				handlers: map[string]idem.HandlerFunc{auditType: func(context.Context, idem.Envelope) error {
					return tc.fail(int(calls.Add(1)))
				}},
			})
			b.publish(auditEnv("audit-1"))
			b.settle()
			b.stop()
			if got := calls.Load(); got != int64(tc.wantCalls) {
				t.Errorf("handler ran %d times, want %d", got, tc.wantCalls)
			}
			dls := b.deadLetters()
			switch {
			case tc.wantReason == "" && len(dls) != 0:
				t.Errorf("got dead letters %+v, want none", dls)
			case tc.wantReason != "" && (len(dls) != 1 || dls[0].Reason != tc.wantReason || dls[0].Attempts != tc.wantCalls):
				t.Errorf("got dead letters %+v, want one with reason %s after %d attempts", dls, tc.wantReason, tc.wantCalls)
			}
			wantApplied := int64(0)
			if tc.wantReason == "" {
				wantApplied = 1
			}
			if s := b.stats(); s.Applied != wantApplied || s.Retries != int64(min(tc.wantCalls-1, 3)) {
				t.Errorf("stats %+v: want Applied %d, Retries %d", s, wantApplied, min(tc.wantCalls-1, 3))
			}
		})
	}
}

// TestHandleRunsOnceAcrossConsumers: copies of one message received by
// several consumers taking turns run its handler once. The first run
// holds until every consumer has received a copy; a copy whose lane did
// not wait for the first one would run the handler beside it.
func TestHandleRunsOnceAcrossConsumers(t *testing.T) {
	t.Parallel()
	const copies = 8
	var (
		calls atomic.Int32
		eng   atomic.Pointer[idem.Engine]
	)
	b := setup(t, &options{
		cfg:     idem.Config{BatchSize: 1, Consumers: 4, Lanes: 4},
		noStart: true,
		handlers: map[string]idem.HandlerFunc{auditType: func(context.Context, idem.Envelope) error {
			if calls.Add(1) == 1 {
				deadline := time.Now().Add(5 * time.Second)
				for eng.Load().Stats().Received < 4 && calls.Load() == 1 && time.Now().Before(deadline) {
					runtime.Gosched()
				}
			}
			return nil
		}},
	})
	eng.Store(b.engine())
	env := auditEnv("audit-once")
	for range copies {
		b.publish(env)
	}
	b.start()
	b.settle()
	b.stop()
	if got := calls.Load(); got != 1 {
		t.Errorf("handler ran %d times, want 1", got)
	}
	if s := b.stats(); s.Applied != 1 || s.Duplicates != copies-1 {
		t.Errorf("stats %+v: want Applied 1, Duplicates %d", s, copies-1)
	}
}

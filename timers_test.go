package idem_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

func (b *bundle) timers() []store.Timer {
	b.t.Helper()
	ts, err := b.mstore.ListTimers(b.ctx, &store.ListParams{Limit: 1000})
	if err != nil {
		b.t.Fatalf("ListTimers: %v", err)
	}
	return ts
}

func (b *bundle) runTimers() int {
	b.t.Helper()
	n, err := b.engine().RunTimers(b.ctx)
	if err != nil {
		b.t.Fatalf("RunTimers: %v", err)
	}
	return n
}

// A scheduled timer fires once its due time passes on the engine's clock,
// and not before.
func TestTimerFiresWhenDue(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.send("inc-1", Inc{Key: "k", N: 1})
	b.settle()
	ts := b.timers()
	if len(ts) != 1 || ts[0].Name != timerName || !ts[0].DueAt.Equal(epoch.Add(time.Hour)) {
		t.Fatalf("timers %+v: want one %q due at %s", ts, timerName, epoch.Add(time.Hour))
	}
	if n := b.runTimers(); n != 0 {
		t.Fatalf("RunTimers fired %d timers an hour early", n)
	}
	b.clock.Advance(time.Hour - time.Nanosecond)
	if n := b.runTimers(); n != 0 {
		t.Fatalf("RunTimers fired %d timers a nanosecond early", n)
	}
	b.clock.Advance(time.Nanosecond)
	if n := b.runTimers(); n != 1 {
		t.Fatalf("RunTimers fired %d timers when due, want 1", n)
	}
	b.settle()
	c, in := b.counter("k")
	if !c.TimedOut || in.State != "Closed" || in.FinishedAt.IsZero() {
		t.Errorf("after the timeout: state %s, timed out %v, finished at %v; want Closed, true, set", in.State, c.TimedOut, in.FinishedAt)
	}
	if ts := b.timers(); len(ts) != 0 {
		t.Errorf("timers left after firing: %+v", ts)
	}
	if n := b.runTimers(); n != 0 {
		t.Errorf("RunTimers fired %d timers again", n)
	}
	if s := b.engine().Stats(); s.TimersFired != 1 {
		t.Errorf("stats %+v: want TimersFired 1", s)
	}
}

// An unscheduled timer never fires.
func TestUnscheduledTimerNeverFires(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.send("inc-1", Inc{Key: "disarmed", N: 1})
	b.send("inc-2", Inc{Key: "closed", N: 1})
	b.settle()
	if ts := b.timers(); len(ts) != 2 {
		t.Fatalf("got %d timers, want 2", len(ts))
	}
	b.send("disarm-1", Disarm{Key: "disarmed"})
	b.send("close-2", Close{Key: "closed"})
	b.settle()
	if ts := b.timers(); len(ts) != 0 {
		t.Fatalf("timers left after unscheduling: %+v", ts)
	}
	b.clock.Advance(48 * time.Hour)
	if n := b.runTimers(); n != 0 {
		t.Fatalf("RunTimers fired %d unscheduled timers", n)
	}
	b.settle()
	c, in := b.counter("disarmed")
	if c.TimedOut || in.State != "Open" || len(in.Timers) != 0 {
		t.Errorf("disarmed saga: state %s, timed out %v, timers %v; want Open, false, none", in.State, c.TimedOut, in.Timers)
	}
	if c, _ := b.counter("closed"); c.TimedOut {
		t.Error("closed saga timed out")
	}
}

// A timer envelope that arrives after the saga unscheduled it (it was
// claimed and published just before the cancel committed) is dropped,
// counted, and changes nothing, even in a state that handles the event.
func TestStaleTimerIsHarmless(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.send("inc-1", Inc{Key: "k", N: 1})
	b.settle()
	ts := b.timers()
	if len(ts) != 1 {
		t.Fatalf("got %d timers, want 1", len(ts))
	}
	fired := ts[0].Envelope
	b.send("disarm-1", Disarm{Key: "k"})
	b.settle()
	_, before := b.counter("k")

	b.publish(fired)
	b.settle()
	eventually(t, func() bool { return b.engine().Stats().StaleTimers == 1 })
	c, after := b.counter("k")
	if c.TimedOut || after.State != "Open" || after.Version != before.Version || string(after.Data) != string(before.Data) {
		t.Errorf("stale timer changed the saga: state %s v%d data %s, was %s v%d data %s",
			after.State, after.Version, after.Data, before.State, before.Version, before.Data)
	}
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Errorf("got dead letters %+v, want none", dls)
	}
	if j := b.journal("k"); len(j) != 2 {
		t.Errorf("journal has %d entries, want 2 (inc, disarm)", len(j))
	}
}

// The timer poller crashes after publishing a timer and before deleting
// it: the timer fires again after its claim lease with the same ID, and
// the saga's inbox recognises it.
func TestTimerRefiredAfterCrashIsDeduplicated(t *testing.T) {
	t.Parallel()
	hooks := &hookStore{}
	b := setup(t, &options{hooks: hooks, cfg: idem.Config{ClaimLease: time.Minute}})
	b.send("inc-1", Inc{Key: "k", N: 1})
	b.settle()
	b.clock.Advance(time.Hour)
	hooks.failDeleteTimers.Store(true)
	if _, err := b.engine().RunTimers(b.ctx); err == nil {
		t.Fatal("RunTimers: got nil error from a failing DeleteTimers")
	}
	b.settle()
	_, first := b.counter("k")
	if first.State != "Closed" {
		t.Fatalf("after the first firing: state %s, want Closed", first.State)
	}
	if n := b.runTimers(); n != 0 {
		t.Fatalf("RunTimers re-fired %d timers within the claim lease", n)
	}
	b.clock.Advance(time.Minute)
	if n := b.runTimers(); n != 1 {
		t.Fatalf("RunTimers fired %d timers after the lease, want the 1 left behind", n)
	}
	b.settle()
	_, second := b.counter("k")
	if second.Version != first.Version {
		t.Errorf("re-fired timer changed the saga: version %d, was %d", second.Version, first.Version)
	}
	eventually(t, func() bool { return b.engine().Stats().Duplicates == 1 })
	if ts := b.timers(); len(ts) != 0 {
		t.Errorf("timers left: %+v", ts)
	}
}

// Sweep deletes finished sagas older than Retention with their inbox
// records, in batches of SweepBatch, until none is left; recently finished
// and active sagas stay.
func TestSweepDeletesFinishedSagas(t *testing.T) {
	t.Parallel()
	hooks := &hookStore{}
	b := setup(t, &options{hooks: hooks, cfg: idem.Config{Retention: time.Hour, OutboxRetention: time.Hour, SweepBatch: 3}})
	for i := range 10 {
		b.send(fmt.Sprintf("inc-%d", i), Inc{Key: fmt.Sprintf("k%d", i), N: 1})
	}
	b.settle()
	for i := range 7 {
		b.send(fmt.Sprintf("close-%d", i), Close{Key: fmt.Sprintf("k%d", i)})
	}
	b.settle()
	b.clock.Advance(2 * time.Hour)
	b.send("close-7", Close{Key: "k7"}) // finished now: within retention
	b.settle()

	res, err := b.engine().Sweep(b.ctx)
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if res.Instances != 7 || res.Outbox != 10 {
		t.Errorf("Sweep = %+v, want 7 instances and 10 sent outbox rows", res)
	}
	calls := hooks.sweepCalls()
	for i, c := range calls {
		if c.limit != 3 || c.res.Instances > 3 || c.res.Outbox > 3 {
			t.Errorf("store sweep %d: limit %d deleted %+v; want limit 3 and at most 3 each", i, c.limit, c.res)
		}
	}
	if len(calls) != 4 { // (3,3) (3,3) (1,3) (0,1)
		t.Errorf("got %d store sweeps %+v, want 4", len(calls), calls)
	}
	for i := range 10 {
		key := fmt.Sprintf("k%d", i)
		in := b.instance(key)
		inbox := seen(t, b.mstore, store.InboxKey{SagaType: counterType, Key: key, MessageID: incType + "\x1f" + fmt.Sprintf("inc-%d", i)})
		switch {
		case i < 7 && (in != nil || inbox):
			t.Errorf("%s finished 2h ago: instance %v, inbox record %v; want both gone", key, in != nil, inbox)
		case i >= 7 && (in == nil || !inbox):
			t.Errorf("%s (recent or active): instance %v, inbox record %v; want both kept", key, in != nil, inbox)
		}
	}
	if s := b.engine().Stats(); s.Swept != 7 {
		t.Errorf("stats %+v: want Swept 7", s)
	}
	if res, err := b.engine().Sweep(b.ctx); err != nil || res.Instances != 0 || res.Outbox != 0 {
		t.Errorf("second Sweep = %+v, %v; want nothing deleted", res, err)
	}
}

// Inbox records of plain handlers belong to no saga: Sweep deletes those
// older than Retention in batches, so the dedup window of a handler is the
// retention. Records of active sagas are kept (TestSweepDeletesFinishedSagas).
func TestSweepDeletesHandlerInbox(t *testing.T) {
	t.Parallel()
	var calls callCounter
	hooks := &hookStore{}
	b := setup(t, &options{
		hooks: hooks,
		cfg:   idem.Config{Retention: time.Hour, SweepBatch: 2},
		handlers: map[string]idem.HandlerFunc{auditType: func(_ context.Context, env idem.Envelope) error {
			calls.inc(env.ID)
			return nil
		}},
	})
	for i := range 5 {
		b.publish(auditEnv(fmt.Sprintf("old-%d", i)))
	}
	b.settle()
	b.clock.Advance(2 * time.Hour)
	b.publish(auditEnv("recent"))
	b.settle()

	res, err := b.engine().Sweep(b.ctx)
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if res.Inbox != 5 || res.Instances != 0 {
		t.Errorf("Sweep = %+v, want 5 inbox records and no instance", res)
	}
	for i, c := range hooks.sweepCalls() {
		if c.limit != 2 || c.res.Inbox > 2 {
			t.Errorf("store sweep %d: limit %d deleted %+v; want limit 2, at most 2 inbox records", i, c.limit, c.res)
		}
	}
	// Past retention a message is new again; within it, still a duplicate.
	b.publish(auditEnv("old-0"), auditEnv("recent"))
	b.settle()
	if got := calls.get("old-0"); got != 2 {
		t.Errorf("old-0 handled %d times, want 2 (its inbox record was swept)", got)
	}
	if got := calls.get("recent"); got != 1 {
		t.Errorf("recent handled %d times, want 1 (its inbox record is within retention)", got)
	}
}

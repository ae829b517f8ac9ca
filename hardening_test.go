package idem_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
)

// Every envelope field is validated at the engine's boundary, whatever the
// store: a hostile value is dead-lettered with a reason naming the field.
// The same cases run on SQLite and PostgreSQL through enginetest.
func TestHostileEnvelopeFieldsAreDeadLettered(t *testing.T) {
	t.Parallel()
	enginetest.HostileInput(t, func(t *testing.T) store.Store { return memstore.New(nil) })
}

// Engine.Publish refuses what the consumer would dead-letter, naming the
// field, so a producer learns at once.
func TestPublishRefusesHostileFields(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, c := range enginetest.HostileEnvelopes() {
		if c.Reason == idem.ReasonInvalidKey {
			continue // the key is in the body: the consumer dead-letters it
		}
		err := b.engine().Publish(b.ctx, c.Env)
		if !errors.Is(err, idem.ErrInvalidEnvelope) {
			t.Errorf("%s: Publish error %v, want ErrInvalidEnvelope", c.Name, err)
			continue
		}
		var fe *transport.FieldError
		if !errors.As(err, &fe) || "invalid_"+fe.Field != c.Reason && !(fe.Field == transport.FieldID && c.Reason == idem.ReasonInvalidID) {
			t.Errorf("%s: Publish error %v does not name the field of reason %s", c.Name, err, c.Reason)
		}
	}
}

// NewEnvelope puts the canonical key into CorrelationID, and no key at all
// when the raw key is invalid: the consumer then dead-letters the message
// with invalid_key instead of the store refusing the envelope.
func TestNewEnvelopeCorrelationIDIsCanonical(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for raw, want := range map[string]string{"Cafe\u0301 ": "Caf\u00e9", "a\x00b": "", "a\xffb": ""} {
		env := b.env("m-"+raw, Inc{Key: raw, N: 1})
		if env.CorrelationID != want {
			t.Errorf("key %q: CorrelationID %q, want %q", raw, env.CorrelationID, want)
		}
	}
	b.publish(b.env("m-nul", Inc{Key: "a\x00b", N: 1}))
	b.settle()
	if dls := b.deadLetters(); len(dls) != 1 || dls[0].Reason != idem.ReasonInvalidKey {
		t.Fatalf("dead letters %+v, want one invalid_key", dls)
	}
}

// A transition whose state the store refuses (store.ErrRejected) is
// dead-lettered alone with invalid_state; the other messages of its batch
// are applied.
func TestRejectedStateIsDeadLetteredAlone(t *testing.T) {
	t.Parallel()
	hooks := &hookStore{beforeCommit: func(c *store.Changes) error {
		for _, in := range append(c.Inserts, c.Updates...) {
			if in.Key == "bad" {
				return &store.RejectedError{Field: "state", Err: errors.New("ERROR: unsupported Unicode escape sequence (SQLSTATE 22P05)")}
			}
		}
		return nil
	}}
	b := setup(t, &options{hooks: hooks, noStart: true, cfg: idem.Config{BatchSize: 16, Lanes: 1}})
	var envs []idem.Envelope
	for i, k := range []string{"a", "bad", "b", "c"} {
		envs = append(envs, b.env("m-"+string(rune('0'+i)), Inc{Key: k, N: 1}))
	}
	b.publish(envs...)
	b.start()
	b.settle()
	dls := b.deadLetters()
	if len(dls) != 1 || dls[0].Reason != idem.ReasonInvalidState || dls[0].Key != "bad" {
		t.Fatalf("dead letters %+v, want one invalid_state for key bad", dls)
	}
	if !strings.Contains(dls[0].Error, "state") {
		t.Errorf("dead letter error %q does not name the state", dls[0].Error)
	}
	for _, k := range []string{"a", "b", "c"} {
		if c, _ := b.counter(k); c.Total != 1 {
			t.Errorf("saga %s: total %d, want 1", k, c.Total)
		}
	}
	if s := b.stats(); s.Applied != 3 || s.DeadLettered != 1 {
		t.Errorf("stats %+v, want Applied 3, DeadLettered 1", s)
	}
}

// A store error that repeats for one message counts towards MaxAttempts:
// that message is dead-lettered (retries_exhausted) and its batch mates
// are applied, so no input can loop forever.
func TestRepeatedStoreErrorCountsTowardsMaxAttempts(t *testing.T) {
	t.Parallel()
	hooks := &hookStore{beforeCommit: func(c *store.Changes) error {
		for _, in := range c.Journal {
			if in.Key == "poison" {
				return errors.New("injected: the store fails this message's unit of work")
			}
		}
		return nil
	}}
	b := setup(t, &options{hooks: hooks, noStart: true, cfg: idem.Config{BatchSize: 16, Lanes: 1, MaxAttempts: 3}})
	b.publish(b.env("m-1", Inc{Key: "a", N: 1}), b.env("m-2", Inc{Key: "poison", N: 1}), b.env("m-3", Inc{Key: "b", N: 1}))
	b.start()
	b.settle()
	dls := b.deadLetters()
	if len(dls) != 1 || dls[0].Reason != idem.ReasonRetriesExhausted || dls[0].Key != "poison" {
		t.Fatalf("dead letters %+v, want one retries_exhausted for key poison", dls)
	}
	if dls[0].Attempts < 3 || !strings.Contains(dls[0].Error, "injected") {
		t.Errorf("dead letter attempts %d, error %q: want >= 3 and the store's error", dls[0].Attempts, dls[0].Error)
	}
	for _, k := range []string{"a", "b"} {
		if c, _ := b.counter(k); c.Total != 1 {
			t.Errorf("saga %s: total %d, want 1", k, c.Total)
		}
	}
}

// A broken database is not a broken message: while the store cannot
// commit anything (not even a dead letter), messages go back with backoff
// however many attempts they use, and none is dead-lettered; once it
// recovers, every message is applied once.
func TestBrokenStoreBacksOffWithoutDeadLettering(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	hooks := &hookStore{beforeCommit: func(*store.Changes) error {
		if broken.Load() {
			return errors.New("injected: connection refused")
		}
		return nil
	}}
	b := setup(t, &options{hooks: hooks, noStart: true, cfg: idem.Config{BatchSize: 16, Lanes: 1, MaxAttempts: 2}})
	b.publish(b.env("m-1", Inc{Key: "a", N: 1}), b.env("m-2", Inc{Key: "b", N: 1}))
	b.start()
	// Wait until each message has gone well past MaxAttempts.
	eventuallyf(t, 30*time.Second, func() bool {
		n := 0
		for _, r := range b.rec.nacked() {
			if r.attempt > 4 {
				n++
			}
		}
		return n >= 2
	}, func() string { return "messages were not retried past MaxAttempts" })
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Fatalf("dead letters %+v while the store was down, want none", dls)
	}
	broken.Store(false)
	b.settle()
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Fatalf("dead letters %+v after recovery, want none", dls)
	}
	for _, k := range []string{"a", "b"} {
		if c, _ := b.counter(k); c.Total != 1 {
			t.Errorf("saga %s: total %d, want 1", k, c.Total)
		}
	}
}

// A store that cannot begin a unit of work is down: nothing is
// dead-lettered, however many attempts the messages use.
func TestUnreachableStoreBacksOff(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	down.Store(true)
	hooks := &hookStore{beforeBegin: func() error {
		if down.Load() {
			return errors.New("injected: dial tcp: connection refused")
		}
		return nil
	}}
	b := setup(t, &options{hooks: hooks, noStart: true, cfg: idem.Config{BatchSize: 16, Lanes: 1, MaxAttempts: 2}})
	b.publish(b.env("m-1", Inc{Key: "a", N: 1}))
	b.start()
	eventuallyf(t, 30*time.Second, func() bool {
		rs := b.rec.nacked()
		return len(rs) > 0 && rs[len(rs)-1].attempt > 4
	}, func() string { return "the message was not retried past MaxAttempts" })
	down.Store(false)
	b.settle()
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Fatalf("dead letters %+v, want none", dls)
	}
	if c, _ := b.counter("a"); c.Total != 1 {
		t.Errorf("total %d, want 1", c.Total)
	}
}

// A commit that reports an error although it landed (the connection was
// lost during COMMIT) is read back: its messages are counted as applied,
// as the store confirms, and not returned to the transport.
func TestUncertainCommitIsReadBack(t *testing.T) {
	t.Parallel()
	var lies atomic.Int64
	hooks := &hookStore{afterCommit: func(c *store.Changes, err error) error {
		if err == nil && writesState(c) && lies.Add(1) <= 3 {
			return errors.New("injected: connection reset during COMMIT")
		}
		return err
	}}
	b := setup(t, &options{hooks: hooks, noStart: true, cfg: idem.Config{BatchSize: 4, Lanes: 1}})
	const n = 12
	for i := range n {
		b.publish(b.env("m-"+string(rune('a'+i)), Inc{Key: string(rune('a' + i)), N: 1}))
	}
	b.start()
	b.settle()
	s := b.stats()
	if s.Applied != n || s.Duplicates != 0 || s.Retries != 0 {
		t.Errorf("stats %+v: want Applied %d, Duplicates 0, Retries 0", s, n)
	}
	if got := len(b.instances()); got != n {
		t.Errorf("%d sagas, want %d", got, n)
	}
}

// The dedup identity includes the message type: two producers whose IDs
// overlap do not have each other's messages skipped.
func TestDedupIdentityIncludesType(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.send("shared-1", Inc{Key: "k", N: 2})
	b.settle()
	b.send("shared-1", Close{Key: "k"})
	b.send("shared-1", Inc{Key: "k", N: 5}) // a true duplicate
	b.settle()
	c, in := b.counter("k")
	if in.State != "Closed" || c.Total != 2 {
		t.Fatalf("state %s total %d, want Closed and 2 (the Close applied, the repeated Inc skipped)", in.State, c.Total)
	}
	if s := b.stats(); s.Duplicates != 1 {
		t.Errorf("duplicates %d, want 1", s.Duplicates)
	}
}

// One loop that fails stops the engine: a closed transport ends the
// consumer, Done closes, and the error reaches Stop and Ready.
func TestFailedLoopStopsEngine(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{noStart: true})
	e := b.engine()
	if err := e.Ready(); err == nil {
		t.Error("Ready before Start: nil, want an error")
	}
	b.start()
	if err := e.Ready(); err != nil {
		t.Errorf("Ready while running: %v", err)
	}
	if err := b.mem.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Done did not close after the transport closed")
	}
	if err := e.Ready(); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Ready after the consumer failed: %v, want it to wrap transport.ErrClosed", err)
	}
	if err := e.Stop(b.ctx); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Stop: %v, want it to wrap transport.ErrClosed", err)
	}
	b.stopOnce.Do(func() {}) // stopped here, with the error expected

}

// Run blocks until its context ends, then stops cleanly; it returns a
// failed loop's error without waiting for the context.
func TestRun(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{noStart: true})
	ctx, cancel := context.WithCancel(b.ctx)
	ran := make(chan error, 1)
	go func() { ran <- b.engine().Run(ctx) }()
	b.send("m-1", Inc{Key: "k", N: 1})
	b.settle()
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run after cancel: %v, want nil", err)
	}
	if c, _ := b.counter("k"); c.Total != 1 {
		t.Errorf("total %d, want 1", c.Total)
	}
	if err := b.engine().Run(b.ctx); !errors.Is(err, idem.ErrStopped) {
		t.Errorf("second Run: %v, want ErrStopped", err)
	}

	b2 := setup(t, &options{noStart: true})
	go func() { ran <- b2.engine().Run(context.Background()) }()
	eventuallyf(t, 30*time.Second, func() bool { return b2.engine().Ready() == nil }, func() string { return "the engine did not start" })
	_ = b2.mem.Close()
	if err := <-ran; !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Run with a closed transport: %v, want it to wrap transport.ErrClosed", err)
	}
	b2.stopOnce.Do(func() {}) // Run stopped it, with the error expected

}

// A message that used up MaxAttempts on a commit whose outcome stayed
// unknown, but which did land, is not dead-lettered: the dead letter's
// unit of work reads the inbox first.
func TestExhaustedButCommittedIsNotDeadLettered(t *testing.T) {
	t.Parallel()
	var lied atomic.Bool
	var down atomic.Int64
	hooks := &hookStore{afterCommit: func(c *store.Changes, err error) error {
		if err == nil && writesState(c) && lied.CompareAndSwap(false, true) {
			down.Store(5) // every read-back fails
			return errors.New("read tcp: connection reset by peer during COMMIT")
		}
		return err
	}, beforeBegin: func() error {
		if down.Add(-1) >= 0 {
			return errors.New("dial tcp: connection refused")
		}
		return nil
	}}
	b := setup(t, &options{hooks: hooks, cfg: idem.Config{MaxAttempts: 1}})
	b.send("inc-1", Inc{Key: "k", N: 3})
	b.settle()
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Fatalf("dead letters %+v for a message that was committed, want none", dls)
	}
	if c, _ := b.counter("k"); c.Total != 3 {
		t.Errorf("total %d, want 3", c.Total)
	}
}

// Conflicts that use up ConflictRetries never dead-letter a message,
// however many attempts it has: nothing is wrong with it.
func TestExhaustedConflictsAreNotDeadLettered(t *testing.T) {
	t.Parallel()
	var conflicts atomic.Int64
	hooks := &hookStore{beforeCommit: func(c *store.Changes) error {
		if writesState(c) && conflicts.Add(1) <= 6 {
			return store.ErrConflict
		}
		return nil
	}}
	b := setup(t, &options{hooks: hooks, cfg: idem.Config{MaxAttempts: 1, ConflictRetries: 1}})
	b.send("inc-1", Inc{Key: "k", N: 3})
	b.settle()
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Fatalf("dead letters %+v after conflicts, want none", dls)
	}
	if c, _ := b.counter("k"); c.Total != 3 {
		t.Errorf("total %d, want 3", c.Total)
	}
}

package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// Three engines share one store and a transport that duplicates every
// message twice, reorders, loses 30% of the acks and has a short lease.
// Every increment is applied exactly once and every Incremented event is
// emitted with exactly one ID per Inc.
func TestExactlyOnceUnderFaults(t *testing.T) {
	t.Parallel()
	const keys, perKey = 200, 4
	b := setup(t, &options{
		replicas: 3,
		mem:      memtransport.Config{Duplicate: 2, Reorder: true, LoseAckRate: 0.3, Lease: 100 * time.Millisecond, Seed: 42},
		cfg:      idem.Config{BatchSize: 16},
	})
	want := map[string]int{}
	var envs []idem.Envelope
	for k := range keys {
		key := fmt.Sprintf("key-%03d", k)
		for j := range perKey {
			n := (k*7+j)%10 + 1
			want[key] += n
			envs = append(envs, b.env(fmt.Sprintf("inc-%03d-%d", k, j), Inc{Key: key, N: n}))
		}
	}
	b.publish(envs...)
	eventuallyf(t, 90*time.Second, func() bool { return b.mem.Unsettled() == 0 },
		func() string { return fmt.Sprintf("%d pending; transport %+v", b.mem.Unsettled(), b.mem.Stats()) })
	b.stop()

	if dls := b.deadLetters(); len(dls) != 0 {
		t.Fatalf("got %d dead letters, want none; first: %+v", len(dls), dls[0])
	}
	events := map[string]map[string]bool{} // saga key → distinct Incremented IDs
	for _, e := range b.rec.sent(incrementedType) {
		k := e.Headers[transport.HeaderSagaKey]
		if events[k] == nil {
			events[k] = map[string]bool{}
		}
		events[k][e.ID] = true
	}
	for key, sum := range want {
		c, _ := b.counter(key)
		if c.Total != sum || c.Incs != perKey {
			t.Errorf("%s: got total %d after %d incs, want %d after %d", key, c.Total, c.Incs, sum, perKey)
		}
		if j := b.journal(key); len(j) != perKey {
			t.Errorf("%s: journal has %d entries, want %d", key, len(j), perKey)
		}
		if got := len(events[key]); got != perKey {
			t.Errorf("%s: Incremented emitted with %d distinct IDs, want %d", key, got, perKey)
		}
	}
	if n := b.backlog(); n != 0 {
		t.Errorf("outbox backlog %d, want 0", n)
	}
	s := b.stats()
	if s.Applied != keys*perKey || s.Emitted != keys*perKey || s.DeadLettered != 0 {
		t.Errorf("stats %+v: want Applied = Emitted = %d, DeadLettered 0", s, keys*perKey)
	}
	if s.Duplicates == 0 {
		t.Errorf("stats %+v: want Duplicates > 0 under injected duplicates", s)
	}
	ms := b.mem.Stats()
	if ms.DuplicatesInjected == 0 || ms.AcksLost == 0 {
		t.Errorf("transport stats %+v: the faults were not injected", ms)
	}
	t.Logf("engines %+v; transport %+v", s, ms)
}

// emitted returns the IDs of every distinct envelope the bundle's engines
// emitted (events and timers), in emission order.
func emittedIDs(t *testing.T, b *bundle) (events []string, timers []string) {
	t.Helper()
	seen := map[string]bool{}
	b.rec.mu.Lock()
	for _, e := range b.rec.published {
		if e.Headers[transport.HeaderSagaType] != "" && !seen[e.ID] {
			seen[e.ID] = true
			events = append(events, e.ID)
		}
	}
	b.rec.mu.Unlock()
	ts, err := b.mstore.ListTimers(b.ctx, &store.ListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, tm := range ts {
		timers = append(timers, tm.Envelope.ID)
	}
	return events, timers
}

// The IDs of emitted messages depend only on the incoming message, the saga
// and the emission's index: two independent engines and stores give the
// same IDs; other messages or other indexes give others.
func TestDeterministicEmittedIDs(t *testing.T) {
	t.Parallel()
	run := func(later time.Duration) (*bundle, []string, []string) {
		b := setup(t, nil)
		b.clock.Advance(later) // processed at another time: same IDs
		b.send("m-1", Inc{Key: "k", N: 1, Notes: 2})
		b.settle()
		ev, tm := emittedIDs(t, b)
		return b, ev, tm
	}
	b1, ev1, tm1 := run(0)
	_, ev2, tm2 := run(26 * time.Hour)
	if len(ev1) != 3 || len(tm1) != 1 {
		t.Fatalf("got %d emitted events and %d timers, want 3 and 1", len(ev1), len(tm1))
	}
	if !slices.Equal(ev1, ev2) || !slices.Equal(tm1, tm2) {
		t.Errorf("same message on two engines: got events %v / %v and timers %v / %v, want equal", ev1, ev2, tm1, tm2)
	}
	all := append(slices.Clone(ev1), tm1...)
	if len(distinct(all)) != len(all) {
		t.Errorf("emissions of one message share an ID: %v", all)
	}
	for _, e := range b1.rec.sent(incrementedType) {
		if e.CausationID != "m-1" || e.Headers[transport.HeaderSagaType] != counterType ||
			e.Headers[transport.HeaderSagaKey] != "k" || e.Headers[transport.HeaderIntent] != "publish" {
			t.Errorf("emitted envelope %+v: want causation m-1, saga counter/k, intent publish", e)
		}
	}

	// Another incoming message on the same saga: other IDs.
	b1.send("m-2", Inc{Key: "k", N: 1})
	b1.settle()
	ev3 := b1.rec.distinctIDs(incrementedType)
	if len(ev3) != 2 {
		t.Fatalf("got %d distinct Incremented IDs after m-2, want 2", len(ev3))
	}
	// The same message ID for another key: other IDs too.
	b1.send("m-1", Inc{Key: "k2", N: 1})
	b1.settle()
	if got := b1.rec.distinctIDs(incrementedType); len(got) != 3 {
		t.Errorf("got %d distinct Incremented IDs after m-1 for k2, want 3", len(got))
	}
}

func distinct(ids []string) map[string]bool {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// When an envelope carries an IdempotencyKey it is the dedup identity, not
// the ID.
func TestIdempotencyKeyIsDedupIdentity(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a := b.env("upload-a", Inc{Key: "k", N: 5})
	a.IdempotencyKey = "sha256:file-1"
	c := b.env("upload-b", Inc{Key: "k", N: 5})
	c.IdempotencyKey = "sha256:file-1"
	b.publish(a)
	b.settle()
	b.publish(c)
	b.settle()
	cnt, _ := b.counter("k")
	if cnt.Total != 5 || cnt.Incs != 1 {
		t.Fatalf("two envelopes with one idempotency key: total %d after %d incs, want 5 after 1", cnt.Total, cnt.Incs)
	}
	j := b.journal("k")
	if len(j) != 1 || j[0].MessageID != "sha256:file-1" {
		t.Errorf("journal %+v: want one entry with message ID sha256:file-1", j)
	}
	if ids := b.rec.distinctIDs(incrementedType); len(ids) != 1 {
		t.Errorf("Incremented emitted with %d distinct IDs, want 1", len(ids))
	}
	// The same ID with another idempotency key is another message.
	d := b.env("upload-a", Inc{Key: "k", N: 1})
	d.IdempotencyKey = "sha256:file-2"
	b.publish(d)
	b.settle()
	b.stop()
	if cnt, _ := b.counter("k"); cnt.Total != 6 {
		t.Errorf("got total %d, want 6", cnt.Total)
	}
	if s := b.stats(); s.Duplicates != 1 || s.Applied != 2 {
		t.Errorf("stats %+v: want Duplicates 1, Applied 2", s)
	}
}

// A commit that succeeded but reported an error (connection lost during
// COMMIT) is read back: its inbox records are there, so its messages are
// settled and counted as applied, as the store confirms, and nothing is
// retried. The effect is sent once.
func TestCommitOutcomeUnknown(t *testing.T) {
	t.Parallel()
	testCommitOutcomeUnknown(t, 0)
}

// When the store cannot be read back either (it stays down a little
// longer), the messages are returned; the redelivery finds the inbox
// record and does nothing twice, and the relay sends the effect once.
func TestCommitOutcomeUnknownUnreadable(t *testing.T) {
	t.Parallel()
	testCommitOutcomeUnknown(t, 5)
}

func testCommitOutcomeUnknown(t *testing.T, unreadable int64) {
	var lied atomic.Bool
	var down atomic.Int64
	hooks := &hookStore{afterCommit: func(c *store.Changes, err error) error {
		if err == nil && writesState(c) && lied.CompareAndSwap(false, true) {
			down.Store(unreadable)
			return errors.New("read tcp: connection reset by peer during COMMIT")
		}
		return err
	}, beforeBegin: func() error {
		if down.Add(-1) >= 0 {
			return errors.New("dial tcp: connection refused")
		}
		return nil
	}}
	b := setup(t, &options{hooks: hooks})
	b.send("inc-1", Inc{Key: "k", N: 3})
	b.settle()
	if !lied.Load() {
		t.Fatal("the commit error was not injected")
	}
	c, in := b.counter("k")
	if c.Total != 3 || c.Incs != 1 || in.Version != 1 {
		t.Errorf("got total %d after %d incs at version %d, want 3 after 1 at version 1", c.Total, c.Incs, in.Version)
	}
	if j := b.journal("k"); len(j) != 1 {
		t.Errorf("journal has %d entries, want 1", len(j))
	}
	if unreadable == 0 {
		if s := b.stats(); s.Applied != 1 || s.Duplicates != 0 || s.Retries != 0 {
			t.Errorf("stats %+v: want Applied 1 (read back), Duplicates 0, Retries 0", s)
		}
	} else {
		eventually(t, func() bool { s := b.stats(); return s.Duplicates >= 1 && s.Retries >= 1 })
	}
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Errorf("got dead letters %+v, want none", dls)
	}

	// Whoever sends the effect (the engine after reading back, or the
	// relay), it is sent under one ID.
	b.clock.Advance(time.Second)
	for range 2 {
		if _, err := b.engine().RelayOutbox(b.ctx, 0); err != nil {
			t.Fatalf("RelayOutbox: %v", err)
		}
	}
	if ids := b.rec.distinctIDs(incrementedType); len(ids) != 1 {
		t.Errorf("Incremented emitted with %d distinct IDs %v, want 1", len(ids), ids)
	}
	if n := b.backlog(); n != 0 {
		t.Errorf("outbox backlog %d, want 0", n)
	}
}

// The engine commits and then cannot publish (it "crashes" before the
// transport accepts the messages): the outbox rows stay unsent, and the
// relay sends them later with the IDs they were stored with.
func TestCrashBetweenCommitAndPublish(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.rec.setFailPublish(func(msgs []idem.Envelope) bool {
		for _, m := range msgs {
			if m.Headers[transport.HeaderSagaType] != "" {
				return true
			}
		}
		return false
	})
	b.send("inc-1", Inc{Key: "k", N: 1, Notes: 2})
	b.settle() // the delivery is acknowledged: the state is committed
	if c, _ := b.counter("k"); c.Total != 1 {
		t.Fatalf("got total %d, want 1", c.Total)
	}
	if n := b.backlog(); n != 3 {
		t.Fatalf("outbox backlog %d, want 3 unsent messages", n)
	}
	if got := b.rec.sent(incrementedType); len(got) != 0 {
		t.Fatalf("%d Incremented reached the transport although publish failed", len(got))
	}

	// Fresh rows are left to the committing engine.
	if n, err := b.engine().RelayOutbox(b.ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("RelayOutbox(1h) = %d, %v; want 0, nil", n, err)
	}

	b.clock.Advance(time.Second)
	now := b.clock.Now()
	rows, err := b.mstore.ClaimOutbox(b.ctx, &store.ClaimParams{Now: now, CreatedBefore: now, Limit: 100, Lease: 0})
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	bodies := map[string][]byte{}
	for _, r := range rows {
		stored = append(stored, r.Envelope.ID)
		bodies[r.Envelope.ID] = r.Envelope.Body
	}
	sort.Strings(stored)

	b.rec.setFailPublish(nil)
	n, err := b.engine().RelayOutbox(b.ctx, 0)
	if err != nil || n != 3 {
		t.Fatalf("RelayOutbox = %d, %v; want 3, nil", n, err)
	}
	var relayed []string
	for _, typ := range []string{incrementedType, noteType} {
		for _, e := range b.rec.sent(typ) {
			relayed = append(relayed, e.ID)
			if !bytes.Equal(e.Body, bodies[e.ID]) {
				t.Errorf("relayed %s body %s, stored %s", e.ID, e.Body, bodies[e.ID])
			}
		}
	}
	sort.Strings(relayed)
	if !slices.Equal(relayed, stored) {
		t.Errorf("relayed IDs %v, want the stored outbox IDs %v", relayed, stored)
	}
	if n := b.backlog(); n != 0 {
		t.Errorf("outbox backlog %d after relay, want 0", n)
	}
	if n, err := b.engine().RelayOutbox(b.ctx, 0); err != nil || n != 0 {
		t.Errorf("second RelayOutbox = %d, %v; want 0, nil", n, err)
	}
	if s := b.engine().Stats(); s.Relayed != 3 {
		t.Errorf("stats %+v: want Relayed 3", s)
	}
}

// Two engines race on one key with duplicated and distinct messages: the
// store arbitrates, conflicts are re-applied, no increment is lost.
func TestConflictsLoseNoUpdate(t *testing.T) {
	t.Parallel()
	// The first two loads wait for each other, so two engines are
	// guaranteed to apply on the same version at least once.
	var loads atomic.Int64
	both := make(chan struct{})
	hooks := &hookStore{afterLoad: func(p *store.LoadParams) {
		if len(p.Keys) == 0 {
			return
		}
		n := loads.Add(1)
		if n == 2 {
			close(both)
		}
		if n <= 2 {
			timer := time.NewTimer(5 * time.Second)
			defer timer.Stop()
			select {
			case <-both:
			case <-timer.C:
			}
		}
	}}
	b := setup(t, &options{replicas: 2, hooks: hooks, mem: memtransport.Config{Duplicate: 1}, cfg: idem.Config{BatchSize: 4}, noStart: true})
	const n = 100
	sum := 0
	var envs []idem.Envelope
	for i := range n {
		sum += i + 1
		envs = append(envs, b.env(fmt.Sprintf("hot-%d", i), Inc{Key: "hot", N: i + 1}))
	}
	b.publish(envs...)
	b.start()
	b.settle()
	b.stop()
	c, _ := b.counter("hot")
	if c.Total != sum || c.Incs != n {
		t.Errorf("got total %d after %d incs, want %d after %d", c.Total, c.Incs, sum, n)
	}
	if j := b.journal("hot"); len(j) != n {
		t.Errorf("journal has %d entries, want %d", len(j), n)
	}
	if ids := b.rec.distinctIDs(incrementedType); len(ids) != n {
		t.Errorf("Incremented emitted with %d distinct IDs, want %d", len(ids), n)
	}
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Errorf("got dead letters %+v, want none", dls)
	}
	s := b.stats()
	if s.Conflicts == 0 {
		t.Errorf("stats %+v: want Conflicts > 0", s)
	}
	if s.Applied != n {
		t.Errorf("stats %+v: want Applied %d", s, n)
	}
}

// A plain handler that shares a lane with a saga must not run again because
// the saga's unit of work lost an optimistic-concurrency race: its message
// was handled, nothing about it conflicted.
func TestHandlerNotRerunWhenLaneConflicts(t *testing.T) {
	t.Parallel()
	var conflicted atomic.Bool
	hooks := &hookStore{beforeCommit: func(c *store.Changes) error {
		if writesState(c) && conflicted.CompareAndSwap(false, true) {
			return fmt.Errorf("commit saga counter/k: %w", store.ErrConflict)
		}
		return nil
	}}
	var calls callCounter
	b := setup(t, &options{
		machine: newCounter(nil),
		handlers: map[string]idem.HandlerFunc{auditType: func(_ context.Context, env idem.Envelope) error {
			calls.inc(env.ID)
			return nil
		}},
		hooks:   hooks,
		cfg:     idem.Config{Lanes: 1, BatchSize: 16},
		noStart: true,
	})
	// Both in the first batch, and with one lane in one unit of work.
	b.publish(auditEnv("audit-1"), b.env("inc-1", Inc{Key: "k", N: 1}))
	b.start()
	b.settle()
	if !conflicted.Load() {
		t.Fatal("the conflict was not injected")
	}
	if c, _ := b.counter("k"); c.Total != 1 {
		t.Errorf("got total %d, want 1", c.Total)
	}
	if got := calls.get("audit-1"); got != 1 {
		t.Errorf("handler for audit-1 ran %d times, want 1: a conflict of the saga counter/k in the same lane re-ran it", got)
	}
}

// Messages of one key are applied in arrival order (DESIGN, pipeline step
// 3). When the first of two messages of a key in one batch fails with a
// transient error, the second must not be applied ahead of it: here the
// Close would finish the saga and the retried Inc would then be ignored by
// the final state, losing the increment without a trace.
func TestTransientFailureKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	var failed atomic.Bool
	m := newCounter(&counterOpts{onInc: func(c *saga.Context[Counter], _ Inc) error {
		if c.MessageID() == "inc-slow" && failed.CompareAndSwap(false, true) {
			return errors.New("service unavailable")
		}
		return nil
	}})
	b := setup(t, &options{machine: m, noStart: true})
	putInstance(t, b.mstore, &store.Instance{
		SagaType: counterType, Key: "k", State: "Open", Data: []byte(`{"total":0}`),
		SchemaVersion: 1, Version: 1, CreatedAt: epoch, UpdatedAt: epoch,
	})
	// One batch: the Inc, then the Close of the same key.
	b.publish(b.env("inc-slow", Inc{Key: "k", N: 5}), b.env("close-1", Close{Key: "k"}))
	b.start()
	b.settle()
	if !failed.Load() {
		t.Fatal("the transient failure was not injected")
	}
	c, in := b.counter("k")
	if c.Total != 5 {
		var order []string
		for _, j := range b.journal("k") {
			order = append(order, j.MessageID)
		}
		t.Errorf("got total %d in state %s, want 5: applied in order %v, so the retried Inc met a finished saga", c.Total, in.State, order)
	}
}

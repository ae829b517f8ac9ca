package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Features describes what the store under test does beyond store.Store, so
// that the suite checks what it claims and skips, with the reason, what it
// does not. The zero value declares a plain store (memstore's).
type Features struct {
	// Queue is true when the store is a store.Queue whose units of work
	// implement store.QueueUnitOfWork: the engine then consumes deliveries
	// and enqueues emitted messages inside its units of work. Lease is then
	// required.
	Queue bool

	// Lease is the queue's visibility timeout as newStore configured it:
	// how long a received delivery stays invisible before it is handed out
	// again. The suite waits up to 20×Lease for a redelivery and 3×Lease to
	// conclude that nothing more arrives, and expects a received delivery
	// to stay leased while a short step of a test runs: a second or so
	// keeps the queue subtests fast and steady. Required with Queue.
	Lease time.Duration

	// Partitioned is true when the queue implements
	// transport.PartitionedConsumer.
	Partitioned bool

	// Pending is true when the queue implements transport.PendingCounter.
	Pending bool

	// Claim is true when the queue's units of work implement
	// store.ClaimUnitOfWork: the engine may claim messages inside the
	// unit of work that applies them.
	Claim bool

	// Tokens is true when the store implements store.TokenStore (the
	// token inbox).
	Tokens bool

	// Admit is true when the queue implements store.AdmittingQueue: it
	// admits under limits (store.Limiter) as it leases.
	Admit bool

	// TamperJournal, when set, declares that the store keeps its journal
	// append-only even against other writers (a database trigger). It must
	// try, behind the store's back as another program with the database's
	// credentials would, to change one of the journal entries of k and to
	// delete them, and return each attempt's error; the suite checks that
	// every attempt failed and the journal is unchanged, also after a sweep
	// (the one writer allowed to delete entries). Nil skips the check: a
	// store whose journal no other program can reach (memstore) is
	// append-only by its API alone.
	TamperJournal func(t *testing.T, s store.Store, k store.Key) []error

	// DomainTx, when set, declares that the store's units of work implement
	// store.DomainTxUnitOfWork, and says how to run statements through a
	// MessageTx's handle. Nil when they do not (memstore).
	DomainTx *DomainTx

	// Schema, when set, declares that the store's database schema is
	// versioned and checked when the store opens, and says how to open
	// the store on a schema at a given version. Nil when the store has no
	// schema (memstore).
	Schema *Schema

	// SharedClock, when set, declares that several processes share the
	// store and that it measures claim leases on one clock they all see
	// (the database's), not on ClaimParams.Now. It returns two handles on
	// one new, empty store, as two replicas would open it (two pools on one
	// schema, two opens of one file); the suite closes both. Nil skips
	// those cases: a store that one process owns (memstore) measures
	// leases on ClaimParams.Now.
	SharedClock func(t *testing.T) (a, b store.Store)
}

// validate reports an inconsistent f.
func (f Features) validate() error {
	switch {
	case f.Queue && f.Lease <= 0:
		return fmt.Errorf("Features.Queue is set but Features.Lease is %v: give the queue's visibility timeout", f.Lease)
	case !f.Queue && (f.Partitioned || f.Pending || f.Claim || f.Admit):
		return errors.New("Features.Partitioned, Features.Pending, Features.Claim and Features.Admit describe a queue: set Features.Queue too")
	}
	return f.Schema.validate()
}

// redeliveryWait bounds the wait for a redelivery after a lease expiry.
func (f Features) redeliveryWait() time.Duration { return 20 * f.Lease }

// quietWait is how long nothing must arrive for the suite to conclude that
// nothing will.
func (f Features) quietWait() time.Duration { return 3 * f.Lease }

// promptWait bounds the wait for things that should happen at once (a
// delivery of a visible message). It only matters when the store is
// broken, so it is generous for slow machines.
const promptWait = 10 * time.Second

func always(Features) string { return "" }

func needQueue(f Features) string {
	if !f.Queue {
		return "Features.Queue is false: the store is not its own queue"
	}
	return ""
}

func needPartitioned(f Features) string {
	if !f.Partitioned {
		return "Features.Partitioned is false: the queue has no partitioned receive"
	}
	return ""
}

func needPending(f Features) string {
	if !f.Pending {
		return "Features.Pending is false: the queue does not count its messages"
	}
	return ""
}

func needClaim(f Features) string {
	if !f.Claim {
		return "Features.Claim is false: the queue's units of work do not claim"
	}
	return ""
}

func needAdmit(f Features) string {
	if !f.Admit {
		return "Features.Admit is false: the queue does not admit as it leases"
	}
	return ""
}

func needClaimPartitioned(f Features) string {
	if r := needClaim(f); r != "" {
		return r
	}
	return needPartitioned(f)
}

func needTamperJournal(f Features) string {
	if f.TamperJournal == nil {
		return "Features.TamperJournal is nil: no other writer can reach the journal"
	}
	return ""
}

// testFeaturesMatchStore fails when the store implements a capability the
// Features do not declare, or declares one it lacks: an undeclared
// capability would go untested, a missing one would fail in production.
func testFeaturesMatchStore(t *testing.T, s store.Store, f Features) {
	_, isQueue := s.(store.Queue)
	_, partitioned := s.(transport.PartitionedConsumer)
	_, pending := s.(transport.PendingCounter)
	_, tokens := s.(store.TokenStore)
	_, admits := s.(store.AdmittingQueue)
	for _, c := range []struct {
		name             string
		declared, actual bool
		what             string
	}{
		{"Queue", f.Queue, isQueue, "store.Queue"},
		{"Partitioned", f.Partitioned, partitioned, "transport.PartitionedConsumer"},
		{"Pending", f.Pending, pending, "transport.PendingCounter"},
		{"Tokens", f.Tokens, tokens, "store.TokenStore"},
		{"Admit", f.Admit, admits, "store.AdmittingQueue"},
	} {
		switch {
		case c.declared && !c.actual:
			t.Errorf("Features.%s is true but %T does not implement %s", c.name, s, c.what)
		case !c.declared && c.actual:
			t.Errorf("%T implements %s but Features.%s is false: declare it so that the suite tests it", s, c.what, c.name)
		}
	}
	if !f.Queue || !isQueue {
		return
	}
	uow := begin(t, s)
	defer uow.Rollback(t.Context())
	if _, ok := uow.(store.QueueUnitOfWork); !ok {
		t.Errorf("%T is a store.Queue but its unit of work %T does not implement store.QueueUnitOfWork", s, uow)
	}
	switch _, claims := uow.(store.ClaimUnitOfWork); {
	case f.Claim && !claims:
		t.Errorf("Features.Claim is true but the unit of work %T does not implement store.ClaimUnitOfWork", uow)
	case !f.Claim && claims:
		t.Errorf("the unit of work %T implements store.ClaimUnitOfWork but Features.Claim is false: declare it so that the suite tests it", uow)
	}
}

func testJournalAppendOnly(t *testing.T, s store.Store, f Features) {
	base := now()
	ctx := t.Context()
	old := base.Add(-10 * 24 * time.Hour)
	entry := func(k string, v int64, from, to string) store.JournalEntry {
		return store.JournalEntry{SagaType: "order", Key: k, RawKey: k, MessageID: fmt.Sprintf("m-%s-%d", k, v),
			EventType: "Event" + to, FromState: from, ToState: to, Version: v, At: old.Add(time.Duration(v) * time.Second)}
	}
	kept := []store.JournalEntry{entry("kept", 1, "", "Open"), entry("kept", 2, "Open", "Paid")}
	done := newInstance("order", "done", old)
	done.FinishedAt = old
	commit(t, s, &store.Changes{
		Inserts: []*store.Instance{newInstance("order", "kept", old), done},
		Journal: append([]store.JournalEntry{entry("done", 1, "", "Closed")}, kept...),
	})

	check := func(when string) {
		t.Helper()
		errs := f.TamperJournal(t, s, key("order", "kept"))
		if len(errs) == 0 {
			t.Fatalf("%s: TamperJournal made no attempt, want at least an update and a delete", when)
		}
		for i, err := range errs {
			if err == nil {
				t.Errorf("%s: tampering attempt %d succeeded, want it refused (the journal is append-only)", when, i+1)
			}
		}
		got, err := s.Journal(ctx, key("order", "kept"))
		if err != nil {
			t.Fatalf("%s: journal: got error %v, want nil", when, err)
		}
		if len(got) != len(kept) {
			t.Fatalf("%s: journal of order/kept: got %d entries, want %d", when, len(got), len(kept))
		}
		for i := range got {
			checkJournalEntry(t, fmt.Sprintf("%s: journal entry %d", when, i), got[i], kept[i])
		}
	}
	check("before a sweep")

	// The sweeper alone may delete entries, those of the instances it
	// deletes; the journal is append-only again afterwards.
	if _, err := s.Sweep(ctx, &store.SweepParams{FinishedBefore: base, Limit: 10}); err != nil {
		t.Fatalf("sweep: got error %v, want nil", err)
	}
	if j, err := s.Journal(ctx, key("order", "done")); err != nil || len(j) != 0 {
		t.Errorf("journal of the swept order/done: got %d entries, %v; want 0, nil", len(j), err)
	}
	check("after a sweep")
}

func testChangesValidation(t *testing.T, s store.Store) {
	base := now()
	existing := newInstance("order", "a", base)
	commit(t, s, &store.Changes{Inserts: []*store.Instance{existing}})
	updated := func(state string) *store.Instance {
		in := existing.Clone()
		in.State = state
		return in
	}
	withVersion := func(k string, v int64) *store.Instance {
		in := newInstance("order", k, base)
		in.Version = v
		return in
	}
	cases := []struct {
		name     string
		inserts  []*store.Instance
		updates  []*store.Instance
		conflict bool // else an error that is not a conflict
	}{
		{name: "insert with version 0", inserts: []*store.Instance{withVersion("v0", 0)}},
		{name: "insert with version 2", inserts: []*store.Instance{withVersion("v2", 2)}},
		{name: "nil insert", inserts: []*store.Instance{nil}},
		{name: "nil update", updates: []*store.Instance{nil}},
		{name: "one instance updated twice", updates: []*store.Instance{updated("First"), updated("Second")}, conflict: true},
		{name: "one instance inserted and updated", inserts: []*store.Instance{newInstance("order", "b", base)},
			updates: []*store.Instance{newInstance("order", "b", base)}, conflict: true},
	}
	for _, c := range cases {
		ik := store.InboxKey{SagaType: "order", Key: "a", MessageID: "m-" + c.name}
		err := tryCommit(t, s, &store.Changes{
			Inserts:     append([]*store.Instance{newInstance("order", "new", base)}, c.inserts...),
			Updates:     c.updates,
			Inbox:       []store.InboxEntry{{InboxKey: ik, ProcessedAt: base}},
			Outbox:      []store.OutboxMessage{{Envelope: envelope("out-"+c.name, base), CreatedAt: base.Add(-time.Minute)}},
			Timers:      []store.Timer{timer("order", "a", "t", "timer-"+c.name, base.Add(-time.Minute))},
			Journal:     []store.JournalEntry{{SagaType: "order", Key: "a", MessageID: ik.MessageID, EventType: "E", FromState: "Started", ToState: "X", Version: 2, At: base}},
			DeadLetters: []store.DeadLetter{{ID: "dl-" + c.name, Envelope: envelope("dl", base), Reason: "r", FirstFailedAt: base, LastFailedAt: base}},
		})
		switch {
		case err == nil:
			t.Errorf("%s: commit succeeded, want it refused", c.name)
		case c.conflict && !errors.Is(err, store.ErrConflict):
			t.Errorf("%s: got error %v, want one wrapping store.ErrConflict (a second write of one instance in one commit)", c.name, err)
		case !c.conflict && errors.Is(err, store.ErrConflict):
			t.Errorf("%s: got error %v wrapping store.ErrConflict, want another error: retrying cannot fix it", c.name, err)
		}
		res := load(t, s, &store.LoadParams{Keys: []store.Key{key("order", "a"), key("order", "b"), key("order", "new"), key("order", "v2")}, Inbox: []store.InboxKey{ik}})
		checkInstance(t, c.name+": instance order/a", res.Instances[key("order", "a")], existing)
		for _, k := range []string{"b", "new", "v2"} {
			if in := res.Instances[key("order", k)]; in != nil {
				t.Errorf("%s: instance order/%s: got %+v, want nil (nothing of a refused commit is written)", c.name, k, in)
			}
		}
		if res.Seen[ik] {
			t.Errorf("%s: inbox record written by a refused commit", c.name)
		}
		if n, _ := backlog(t, s); n != 0 {
			t.Errorf("%s: outbox backlog: got %d, want 0", c.name, n)
		}
		if ts := listTimers(t, s); len(ts) != 0 {
			t.Errorf("%s: timers: got %q, want none", c.name, timerIDs(ts))
		}
		if j, err := s.Journal(t.Context(), key("order", "a")); err != nil || len(j) != 0 {
			t.Errorf("%s: journal: got %d entries, %v; want 0, nil", c.name, len(j), err)
		}
		if d, err := s.GetDeadLetter(t.Context(), "dl-"+c.name); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: dead letter: got %+v, %v; want an error wrapping store.ErrNotFound", c.name, d, err)
		}
	}
}

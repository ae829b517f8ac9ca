package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

var stateMigrator = implements[store.StateMigrator]("store.StateMigrator")

// stateMigratorCases are run when the store implements
// store.StateMigrator: the eager pass of idem deploy migrate.
var stateMigratorCases = []testCase{
	{"MigrateStatesMovesAndJournals", migratorOnly(testMigrateStatesMovesAndJournals)},
	{"MigrateStatesLimitResumes", migratorOnly(testMigrateStatesLimitResumes)},
	{"MigrateStatesConflictsWithUnitOfWork", migratorOnly(testMigrateStatesConflicts)},
	{"MigrateStatesHostileStrings", migratorOnly(testMigrateStatesHostile)},
}

// migrationEvent stands for saga.MigrationEvent, which storetest does not
// import.
const migrationEvent = "idem.StateMigrated"

func migratorOnly(fn func(t *testing.T, s store.Store, m store.StateMigrator)) func(t *testing.T, s store.Store) {
	return func(t *testing.T, s store.Store) { fn(t, s, s.(store.StateMigrator)) }
}

// seedStates inserts sagas of typ, one per key, in state, at at.
func seedStates(t *testing.T, s store.Store, at time.Time, typ, state string, keys ...string) {
	t.Helper()
	var ins []*store.Instance
	for _, k := range keys {
		in := newInstance(typ, k, at)
		in.State = state
		ins = append(ins, in)
	}
	commit(t, s, &store.Changes{Inserts: ins})
}

func migrateParams(typ, from, to string, limit int, at time.Time) *store.MigrateStatesParams {
	return &store.MigrateStatesParams{SagaType: typ, From: from, To: to, Limit: limit, At: at, EventType: migrationEvent, Actor: "ops"}
}

func migrate(t *testing.T, m store.StateMigrator, p *store.MigrateStatesParams) int {
	t.Helper()
	n, err := m.MigrateStates(t.Context(), p)
	if err != nil {
		t.Fatalf("MigrateStates %s %q>%q: got error %v, want nil", p.SagaType, p.From, p.To, err)
	}
	return n
}

func countState(t *testing.T, m store.StateMigrator, typ, state string) int64 {
	t.Helper()
	n, err := m.CountState(t.Context(), typ, state)
	if err != nil {
		t.Fatalf("CountState %s %q: got error %v, want nil", typ, state, err)
	}
	return n
}

// MigrateStates moves exactly the sagas of the type in From, live and
// finished, bumps their version and UpdatedAt, journals each once with the
// stored document, and a second call moves none.
func testMigrateStatesMovesAndJournals(t *testing.T, s store.Store, m store.StateMigrator) {
	t0 := now()
	seedStates(t, s, t0, "order", "Packing", "o-1", "o-2")
	seedStates(t, s, t0, "order", "Paid", "o-3")
	seedStates(t, s, t0, "invoice", "Packing", "i-1")
	done := newInstance("order", "o-4", t0)
	done.State, done.FinishedAt = "Packing", t0
	commit(t, s, &store.Changes{Inserts: []*store.Instance{done}})
	if got := countState(t, m, "order", "Packing"); got != 3 {
		t.Errorf("CountState order Packing: got %d, want 3", got)
	}
	at := t0.Add(time.Minute)
	if got := migrate(t, m, migrateParams("order", "Packing", "Shipped", 100, at)); got != 3 {
		t.Fatalf("MigrateStates: moved %d, want 3", got)
	}
	for _, k := range []string{"o-1", "o-2", "o-4"} {
		checkMigrated(t, s, k, at)
	}
	for _, k := range []store.Key{key("order", "o-3"), key("invoice", "i-1")} {
		if in := loadOne(t, s, k); in.Version != 1 || in.State == "Shipped" {
			t.Errorf("%v, not in From: got state %q version %d, want untouched", k, in.State, in.Version)
		}
	}
	if got := migrate(t, m, migrateParams("order", "Packing", "Shipped", 100, at)); got != 0 {
		t.Errorf("second MigrateStates: moved %d, want 0", got)
	}
	if got := countState(t, m, "order", "Packing"); got != 0 {
		t.Errorf("CountState after the migration: got %d, want 0", got)
	}
}

// checkMigrated asserts that order/k is in Shipped at version 2, updated
// at at, with one journal entry of the migration.
func checkMigrated(t *testing.T, s store.Store, k string, at time.Time) {
	t.Helper()
	in := loadOne(t, s, key("order", k))
	if in == nil || in.State != "Shipped" || in.Version != 2 || !in.UpdatedAt.Equal(at) {
		t.Errorf("order/%s: got %+v, want state Shipped, version 2, updated at %s", k, in, at)
		return
	}
	js, err := s.Journal(t.Context(), key("order", k))
	if err != nil {
		t.Fatalf("journal of order/%s: %v", k, err)
	}
	if len(js) != 1 {
		t.Fatalf("journal of order/%s: got %d entries, want 1", k, len(js))
	}
	j := js[0]
	want := store.MigrationMessageID("Packing", "Shipped")
	if j.EventType != migrationEvent || j.FromState != "Packing" || j.ToState != "Shipped" || j.Version != 2 ||
		!j.At.Equal(at) || j.MessageID != want || j.Actor != "ops" || !jsonEqual(j.State, in.Data) {
		t.Errorf("journal of order/%s: got %+v (state %s), want event %s Packing>Shipped version 2 at %s message %s actor ops state %s",
			k, j, j.State, migrationEvent, at, want, in.Data)
	}
}

// A call moves at most Limit sagas, and calls again continue where the
// last stopped (a process killed between batches resumes), each saga
// moved and journaled once.
func testMigrateStatesLimitResumes(t *testing.T, s store.Store, m store.StateMigrator) {
	t0 := now()
	keys := make([]string, 7)
	for i := range keys {
		keys[i] = fmt.Sprintf("o-%d", i)
	}
	seedStates(t, s, t0, "order", "Packing", keys...)
	var moved []int
	for range 5 {
		moved = append(moved, migrate(t, m, migrateParams("order", "Packing", "Shipped", 3, t0)))
	}
	if fmt.Sprint(moved) != "[3 3 1 0 0]" {
		t.Errorf("moved by calls with Limit 3: got %v, want [3 3 1 0 0]", moved)
	}
	for _, k := range keys {
		checkMigrated(t, s, k, t0)
	}
}

// A unit of work that loaded a saga before the migration moved it fails
// its commit with ErrConflict, and the migration stands.
func testMigrateStatesConflicts(t *testing.T, s store.Store, m store.StateMigrator) {
	t0 := now()
	seedStates(t, s, t0, "order", "Packing", "o-1")
	k := key("order", "o-1")
	uow := begin(t, s)
	defer func() { _ = uow.Rollback(t.Context()) }()
	in := loadIn(t, uow, &store.LoadParams{Keys: []store.Key{k}}).Instances[k]
	if got := migrate(t, m, migrateParams("order", "Packing", "Shipped", 10, t0)); got != 1 {
		t.Fatalf("MigrateStates: moved %d, want 1", got)
	}
	in.State = "Packed"
	err := uow.Commit(t.Context(), &store.Changes{Updates: []*store.Instance{in}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("commit of a unit of work holding the old version: got %v, want ErrConflict", err)
	}
	checkMigrated(t, s, "o-1", t0)
}

// Hostile strings: params with U+0000 or invalid UTF-8 (or no Limit, the
// same From and To, no At) are refused with ErrRejected and move nothing, CountState of them counts 0, and a state
// with markup and bidi marks moves like any other.
func testMigrateStatesHostile(t *testing.T, s store.Store, m store.StateMigrator) {
	t0 := now()
	odd := "<script>ש\u200f"
	seedStates(t, s, t0, "order", odd, "o-1")
	for _, p := range []*store.MigrateStatesParams{
		migrateParams("order", odd, "A\x00B", 10, t0),
		migrateParams("order", odd, "\xff\xfe", 10, t0),
		migrateParams("ord\x00er", odd, "Shipped", 10, t0),
		migrateParams("order", "\xff", "Shipped", 10, t0),
		migrateParams("order", odd, "Shipped", 0, t0),
		migrateParams("order", odd, odd, 10, t0),
		migrateParams("order", odd, "Shipped", 10, time.Time{}),
	} {
		if n, err := m.MigrateStates(t.Context(), p); !errors.Is(err, store.ErrRejected) || n != 0 {
			t.Errorf("MigrateStates %q %q>%q limit %d: got %d, %v; want 0 and ErrRejected", p.SagaType, p.From, p.To, p.Limit, n, err)
		}
	}
	for _, st := range []string{"\x00", "\xff", "Shipped"} {
		if got := countState(t, m, "order", st); got != 0 {
			t.Errorf("CountState %q: got %d, want 0", st, got)
		}
	}
	if got := migrate(t, m, migrateParams("order", odd, "Shipped", 10, t0)); got != 1 {
		t.Fatalf("MigrateStates from %q: moved %d, want 1", odd, got)
	}
	if in := loadOne(t, s, key("order", "o-1")); in.State != "Shipped" || in.Version != 2 {
		t.Errorf("after migrating from %q: got state %q version %d, want Shipped 2", odd, in.State, in.Version)
	}
}

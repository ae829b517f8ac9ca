package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/idemhq/idem/store"
)

// DomainTx tells the suite how to run statements through the handle of a
// store.MessageTx, for stores whose units of work implement
// store.DomainTxUnitOfWork.
type DomainTx struct {
	// Setup creates, in the store's database, an empty table that Insert
	// writes to and Count reads.
	Setup func(t *testing.T, s store.Store)
	// Insert adds a row holding v through handle.
	Insert func(ctx context.Context, handle any, v string) error
	// Count returns how many committed rows hold v, read outside any unit
	// of work.
	Count func(t *testing.T, s store.Store, v string) int
}

// testDomainTx checks that a message's statements commit with the unit of
// work when kept, and never when undone, rolled back or conflicting.
func testDomainTx(t *testing.T, s store.Store, f Features) {
	ctx := t.Context()
	uow := begin(t, s)
	_, ok := uow.(store.DomainTxUnitOfWork)
	_ = uow.Rollback(ctx)
	switch {
	case f.DomainTx == nil && ok:
		t.Fatalf("%T's units of work implement store.DomainTxUnitOfWork but Features.DomainTx is nil: declare it so that the suite tests it", s)
	case f.DomainTx == nil:
		t.Skip("Features.DomainTx is nil: the store shares no transaction with handlers")
	case !ok:
		t.Fatalf("Features.DomainTx is set but %T's units of work do not implement store.DomainTxUnitOfWork", s)
	}
	d := f.DomainTx
	d.Setup(t, s)
	k := store.Key{SagaType: "domain", Key: "k-1"}
	load := func(u store.UnitOfWork) {
		t.Helper()
		if _, err := u.Load(ctx, &store.LoadParams{Keys: []store.Key{k}}); err != nil {
			t.Fatalf("load: %v", err)
		}
	}
	run := func(u store.UnitOfWork, v string, keep bool) {
		t.Helper()
		mt := u.(store.DomainTxUnitOfWork).MessageTx(ctx)
		if err := d.Insert(ctx, mt.Handle(), v); err != nil {
			t.Fatalf("insert %s: %v", v, err)
		}
		if err := mt.End(ctx, keep); err != nil {
			t.Fatalf("end %s (keep %v): got %v, want nil", v, keep, err)
		}
		if err := d.Insert(ctx, mt.Handle(), v+"-late"); err == nil {
			t.Errorf("insert through a handle after End: got nil, want an error")
		}
	}
	in := newInstance("domain", "k-1", now())

	// Kept and undone statements of two messages, and a message with none.
	u := begin(t, s)
	load(u)
	run(u, "kept", true)
	run(u, "undone", false)
	if err := u.(store.DomainTxUnitOfWork).MessageTx(ctx).End(ctx, true); err != nil {
		t.Fatalf("end a scope without statements: %v", err)
	}
	if err := u.Commit(ctx, &store.Changes{Inserts: []*store.Instance{in}}); err != nil {
		t.Fatalf("commit: %v", err)
	}

	// A kept statement of a unit of work that rolls back.
	u = begin(t, s)
	load(u)
	run(u, "rolled-back", true)
	if err := u.Rollback(ctx); err != nil {
		t.Fatalf("rollback: %v", err)
	}

	// A kept statement of a unit of work that conflicts.
	u = begin(t, s)
	load(u)
	run(u, "conflict", true)
	if err := u.Commit(ctx, &store.Changes{Inserts: []*store.Instance{in}}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("commit an existing instance: got %v, want ErrConflict", err)
	}
	_ = u.Rollback(ctx)

	for v, want := range map[string]int{"kept": 1, "undone": 0, "rolled-back": 0, "conflict": 0, "kept-late": 0, "undone-late": 0} {
		if got := d.Count(t, s, v); got != want {
			t.Errorf("rows holding %q: got %d, want %d", v, got, want)
		}
	}
}

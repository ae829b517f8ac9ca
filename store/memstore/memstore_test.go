package memstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Features{Tokens: true}, func(t *testing.T) store.Store {
		return memstore.New(nil)
	})
}

func TestClosed(t *testing.T) {
	ctx := t.Context()
	s := memstore.New(&memstore.Config{})
	uow, err := s.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: got error %v, want nil", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: got error %v, want nil", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second close: got error %v, want nil", err)
	}
	k := store.Key{SagaType: "order", Key: "o-1"}
	p := &store.ClaimParams{Now: time.Now(), Limit: 1}
	calls := map[string]func() error{
		"begin": func() error { _, err := s.Begin(ctx); return err },
		"load": func() error {
			_, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}})
			return err
		},
		"claim outbox":      func() error { _, err := s.ClaimOutbox(ctx, p); return err },
		"mark sent":         func() error { return s.MarkSent(ctx, []string{"x"}, time.Now()) },
		"claim timers":      func() error { _, err := s.ClaimTimers(ctx, p); return err },
		"delete timers":     func() error { return s.DeleteTimers(ctx, nil) },
		"sweep":             func() error { _, err := s.Sweep(ctx, &store.SweepParams{}); return err },
		"list instances":    func() error { _, err := s.ListInstances(ctx, nil); return err },
		"journal":           func() error { _, err := s.Journal(ctx, k); return err },
		"list timers":       func() error { _, err := s.ListTimers(ctx, nil); return err },
		"outbox backlog":    func() error { _, _, err := s.OutboxBacklog(ctx); return err },
		"list dead letters": func() error { _, err := s.ListDeadLetters(ctx, nil); return err },
		"get dead letter":   func() error { _, err := s.GetDeadLetter(ctx, "x"); return err },
		"delete dead letters": func() error {
			_, err := s.DeleteDeadLetters(ctx, []string{"x"})
			return err
		},
		// Commit last: it finishes the unit of work.
		"~commit": func() error { return uow.Commit(ctx, &store.Changes{}) },
	}
	for name, call := range calls {
		err := call()
		if err == nil {
			t.Errorf("%s after close: got nil error, want one", name)
		} else if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s after close: got %v, want an error that is neither a conflict nor not-found", name, err)
		}
	}
	if err := uow.Rollback(ctx); err != nil {
		t.Errorf("rollback after close: got error %v, want nil", err)
	}
}

func TestInsertVersionMustBeOne(t *testing.T) {
	ctx := t.Context()
	s := memstore.New(nil)
	defer s.Close()
	uow, err := s.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: got error %v, want nil", err)
	}
	err = uow.Commit(ctx, &store.Changes{Inserts: []*store.Instance{{SagaType: "order", Key: "o-1", Version: 0}}})
	if err == nil || errors.Is(err, store.ErrConflict) {
		t.Fatalf("insert with version 0: got error %v, want a non-conflict error", err)
	}
}

func TestCursors(t *testing.T) {
	ctx := t.Context()
	s := memstore.New(nil)
	defer s.Close()
	base := time.Now().UTC()
	uow, err := s.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: got error %v, want nil", err)
	}
	var timers []store.Timer
	for i, k := range []string{"c", "a", "b"} {
		timers = append(timers, store.Timer{SagaType: "order", Key: k, Name: "t", DueAt: base.Add(time.Duration(i%2) * time.Minute)})
	}
	err = uow.Commit(ctx, &store.Changes{
		Inserts: []*store.Instance{{SagaType: "order", Key: "a", Version: 1}, {SagaType: "order", Key: "b", Version: 1}},
		Timers:  timers,
	})
	if err != nil {
		t.Fatalf("commit: got error %v, want nil", err)
	}

	// Instances: a bare key without a saga type filter is ambiguous.
	if _, err := s.ListInstances(ctx, &store.ListParams{After: "a"}); err == nil {
		t.Error("list instances with bare cursor and no saga type: got nil error, want one")
	}
	got, err := s.ListInstances(ctx, &store.ListParams{SagaType: "order", After: "order\x00a"})
	if err != nil || len(got) != 1 || got[0].Key != "b" {
		t.Errorf("list instances after order NUL a: got %v, %v; want [b], nil", got, err)
	}

	// Timers are ordered by (DueAt, SagaType, Key, Name): b, c at base; a at base+1m.
	var keys []string
	p := &store.ListParams{Limit: 1}
	for range 5 {
		ts, err := s.ListTimers(ctx, p)
		if err != nil {
			t.Fatalf("list timers: got error %v, want nil", err)
		}
		if len(ts) == 0 {
			break
		}
		last := ts[0]
		keys = append(keys, last.Key)
		p.After = last.DueAt.Format(time.RFC3339Nano) + "\x00" + last.SagaType + "\x00" + last.Key + "\x00" + last.Name
	}
	if got, want := keys, []string{"b", "c", "a"}; !slices.Equal(got, want) {
		t.Errorf("timer pages: got %q, want %q", got, want)
	}
	if _, err := s.ListTimers(ctx, &store.ListParams{After: "bad"}); err == nil {
		t.Error("list timers with malformed cursor: got nil error, want one")
	}
}

func BenchmarkLoadCommit(b *testing.B) {
	ctx := b.Context()
	s := memstore.New(nil)
	defer s.Close()
	k := store.Key{SagaType: "bench", Key: "k"}
	uow, _ := s.Begin(ctx)
	if err := uow.Commit(ctx, &store.Changes{Inserts: []*store.Instance{{SagaType: "bench", Key: "k", Data: []byte(`{"n":0}`), Version: 1}}}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		uow, _ := s.Begin(ctx)
		res, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}})
		if err != nil {
			b.Fatal(err)
		}
		if err := uow.Commit(ctx, &store.Changes{Updates: []*store.Instance{res.Instances[k]}}); err != nil {
			b.Fatal(err)
		}
	}
}

// Every error memstore returns starts with its name, as the other stores'
// errors do, so that a log line says which store failed.
func TestErrorsNameThePackage(t *testing.T) {
	ctx := context.Background()
	st := memstore.New(nil)
	in := &store.Instance{SagaType: "order", Key: "o-1", State: "open", Version: 1, Data: []byte(`{}`)}
	commit := func(c *store.Changes) error {
		u, err := st.Begin(ctx)
		if err != nil {
			return err
		}
		return u.Commit(ctx, c)
	}
	if err := commit(&store.Changes{Inserts: []*store.Instance{in}}); err != nil {
		t.Fatal(err)
	}
	errs := map[string]error{
		"insert of an existing instance": commit(&store.Changes{Inserts: []*store.Instance{in}}),
		"update of a stale version":      commit(&store.Changes{Updates: []*store.Instance{{SagaType: "order", Key: "o-1", State: "open", Version: 5, Data: []byte(`{}`)}}}),
	}
	_, errs["missing dead letter"] = st.GetDeadLetter(ctx, "nope")
	errs["replay of a missing dead letter"] = st.BeginReplay(ctx, "nope", time.Now())
	_, errs["missing schedule"] = st.GetSchedule(ctx, "nope")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	_, errs["begin after close"] = st.Begin(ctx)
	for what, err := range errs {
		if err == nil || !strings.HasPrefix(err.Error(), "memstore: ") {
			t.Errorf("%s: got error %v, want one starting with \"memstore: \"", what, err)
		}
	}
}

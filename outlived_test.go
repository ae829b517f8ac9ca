package idem

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

type asideWork struct {
	Key string `json:"key"`
	N   string `json:"n"`
}

// A lane that holds a message remembered as slow is split (setAside). The
// earlier messages of the slow message's key must stay in its unit of
// work: when one of them is given back (here a transient handler error),
// lane.blocked returns the slow message too. Before the fix they ran in
// the batch mates' unit, and the slow message A2 committed ahead of A1,
// which then found the saga already past Initially: [B1 A2 A1].
func TestSetAsideKeepsKeyOrder(t *testing.T) {
	var mu sync.Mutex
	var order []string
	failed := false
	done := make(chan struct{})
	m := saga.New[struct{}]("aside")
	open := m.State("Open")
	work := saga.NewEvent[asideWork](m, func(w asideWork) string { return w.Key })
	apply := func(_ *saga.Context[struct{}], w asideWork) error {
		mu.Lock()
		defer mu.Unlock()
		if w.N == "A1" && !failed {
			failed = true
			return errors.New("transient")
		}
		if order = append(order, w.N); len(order) == 3 {
			close(done)
		}
		return nil
	}
	m.Initially(saga.When(work).Then(apply).TransitionTo(open))
	m.During(open, saga.When(work).Then(apply))
	e, err := NewEngine(memstore.New(nil), memtransport.New(nil), &Config{Lanes: 1, Consumers: 1, BatchSize: 16,
		RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond,
		TimerInterval: time.Hour, RelayInterval: time.Hour, SweepInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(m); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var envs []Envelope
	for _, w := range []asideWork{{"A", "A1"}, {"A", "A2"}, {"B", "B1"}} {
		env, err := e.NewEnvelope("id-"+w.N, w)
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
	}
	e.units.slow.note(&leaseLost{slow: &item{msgID: envs[1].DedupID()}, took: time.Second, unit: time.Second})
	if err := e.Publish(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	_ = e.Stop(ctx)
	mu.Lock()
	defer mu.Unlock()
	ia, ib := slices.Index(order, "A1"), slices.Index(order, "A2")
	if ia < 0 || ib < 0 || ib < ia {
		t.Errorf("key A applied as %v, want A1 before A2", order)
	}
}

// splitSlow gives each slow key's group every message of that key, the
// earlier ones included, in arrival order; the other keys stay in rest.
func TestSplitSlowGroupsWholeKey(t *testing.T) {
	var u units
	u.base = &base{cfg: Config{MaxAttempts: 10}}
	it := func(key, id string) *item { return &item{typ: "aside", key: key, msgID: id} }
	a1, a2, b1, a3, c1, c2 := it("A", "a1"), it("A", "a2"), it("B", "b1"), it("A", "a3"), it("C", "c1"), it("C", "c2")
	u.slow.note(&leaseLost{slow: a2, took: time.Second, unit: time.Second})
	u.slow.note(&leaseLost{slow: c2, took: time.Second, unit: time.Second})
	rest, groups := u.splitSlow([]*item{a1, a2, b1, a3, c1, c2})
	if !slices.Equal(rest, []*item{b1}) {
		t.Errorf("rest = %v, want [b1]", msgIDs(rest))
	}
	if len(groups) != 2 || !slices.Equal(groups[0], []*item{a1, a2, a3}) || !slices.Equal(groups[1], []*item{c1, c2}) {
		var got [][]string
		for _, g := range groups {
			got = append(got, msgIDs(g))
		}
		t.Errorf("groups = %v, want [[a1 a2 a3] [c1 c2]]", got)
	}
}

func msgIDs(items []*item) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.msgID)
	}
	return out
}

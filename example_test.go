package idem_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// Added adds N to the tally named Tally.
type Added struct {
	Tally string `json:"tally"`
	N     int    `json:"n"`
}

// Tally is the state document of the example saga.
type Tally struct {
	Sum int `json:"sum"`
}

// A tally saga on the in-memory store and transport. The transport delivers
// every message twice and the producer retries one publish; every addition
// still counts once.
func ExampleNewEngine() {
	ctx := context.Background()

	// The machine: the first Added starts a tally, later ones add to it.
	m := saga.New[Tally]("tally")
	counting := m.State("Counting")
	added := saga.NewEvent[Added](m, func(a Added) string { return a.Tally })
	add := func(c *saga.Context[Tally], a Added) error {
		c.Data.Sum += a.N
		return nil
	}
	m.Initially(saga.When(added).Then(add).TransitionTo(counting))
	m.During(counting, saga.When(added).Then(add))

	st := memstore.New(nil)
	defer st.Close()
	tr := memtransport.New(&memtransport.Config{Duplicate: 1}) // every message twice
	defer tr.Close()

	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	if err := e.Register(m); err != nil {
		panic(err)
	}
	if err := e.Start(ctx); err != nil {
		panic(err)
	}

	var first idem.Envelope
	for i, n := range []int{1, 2, 3} {
		// The ID is the producer's identity for the event: a retry reuses it.
		env, err := e.NewEnvelope(fmt.Sprintf("add-%d", i), Added{Tally: "t-1", N: n})
		if err != nil {
			panic(err)
		}
		if i == 0 {
			first = env
		}
		if err := e.Publish(ctx, env); err != nil {
			panic(err)
		}
	}
	if err := e.Publish(ctx, first); err != nil { // the producer retried
		panic(err)
	}

	// Wait until every delivery has been processed and acknowledged.
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for tr.Unsettled() > 0 && time.Now().Before(deadline) {
		<-tick.C
	}
	if err := e.Stop(ctx); err != nil {
		panic(err)
	}

	ins, err := st.ListInstances(ctx, &store.ListParams{SagaType: "tally"})
	if err != nil {
		panic(err)
	}
	for _, in := range ins {
		fmt.Println(in.Key, in.State, string(in.Data))
	}
	s := e.Stats()
	fmt.Printf("applied %d, duplicates skipped %d\n", s.Applied, s.Duplicates)
	// Output:
	// t-1 Counting {"sum":6}
	// applied 3, duplicates skipped 5
}

// Submit and wait: Apply publishes a message and returns once a saga has
// committed it, with the saga as stored; a repeat is reported as a
// duplicate and applied no second time. Run runs the engine until its
// context ends.
func ExampleEngine_PublishAndWait() {
	m := saga.New[Tally]("tally")
	counting := m.State("Counting")
	added := saga.NewEvent[Added](m, func(a Added) string { return a.Tally })
	add := func(c *saga.Context[Tally], a Added) error {
		c.Data.Sum += a.N
		return nil
	}
	m.Initially(saga.When(added).Then(add).TransitionTo(counting))
	m.During(counting, saga.When(added).Then(add))

	st, tr := memstore.New(nil), memtransport.New(nil)
	defer st.Close()
	defer tr.Close()
	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	if err := e.Register(m); err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- e.Run(ctx) }()

	env, _ := e.NewEnvelope("add-1", Added{Tally: "t", N: 5})
	for range 2 {
		r, err := e.PublishAndWait(context.Background(), env)
		if err != nil {
			panic(err)
		}
		fmt.Printf("duplicate=%v state=%s version=%d data=%s\n", r.Duplicate, r.State, r.Version, r.Data)
	}
	stop()
	fmt.Println("run:", <-ran)
	// Output:
	// duplicate=false state=Counting version=1 data={"sum":5}
	// duplicate=true state=Counting version=1 data={"sum":5}
	// run: <nil>
}

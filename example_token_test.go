package idem_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// The token inbox: a message published with a token is applied once and
// its token claimed; a copy delivered later finds no token and is skipped,
// however late (the retention inbox would forget it after
// Config.Retention). Config.Dedup = DedupToken gives every message the
// engine's sagas emit a token the same way.
func ExampleEngine_PublishWithTokens() {
	ctx := context.Background()
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
	e, err := idem.NewEngine(st, tr, &idem.Config{Dedup: idem.DedupToken, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	if err := e.Register(m); err != nil {
		panic(err)
	}
	env, _ := e.NewEnvelope("add-1", Added{Tally: "t", N: 5})
	if err := e.PublishWithTokens(ctx, env); err != nil {
		panic(err)
	}
	n, _ := st.CountTokens(ctx)
	fmt.Println("tokens minted:", n)

	if err := e.Start(ctx); err != nil {
		panic(err)
	}
	waitProcessed(e, 1)
	n, _ = st.CountTokens(ctx)
	fmt.Println("tokens after the message was applied:", n)

	// The transport delivers the message again.
	late := env
	late.Headers = map[string]string{transport.HeaderToken: "1"}
	if err := tr.Publish(ctx, []transport.Envelope{late}); err != nil {
		panic(err)
	}
	waitProcessed(e, 2)
	if err := e.Stop(ctx); err != nil {
		panic(err)
	}
	s := e.Stats()
	fmt.Printf("applied %d, duplicates skipped %d\n", s.Applied, s.Duplicates)
	// Output:
	// tokens minted: 1
	// tokens after the message was applied: 0
	// applied 1, duplicates skipped 1
}

// waitProcessed waits until e has applied or skipped n messages.
func waitProcessed(e *idem.Engine, n int64) {
	deadline := time.Now().Add(10 * time.Second)
	for s := e.Stats(); s.Applied+s.Duplicates < n && time.Now().Before(deadline); s = e.Stats() {
		time.Sleep(time.Millisecond) // polling an observable outcome with a deadline
	}
}

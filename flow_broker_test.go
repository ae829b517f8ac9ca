package idem_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// Beside a broker (here the in-memory transport, with memstore keeping
// the limits), the engine admits through the store after each receive:
// the cap binds per tenant, failures release their slots, and none leaks
// (enginetest.FlowBeside).
func TestFlowBesideABroker(t *testing.T) {
	enginetest.FlowBeside(t, memstore.New(nil), memtransport.New(&memtransport.Config{Lease: time.Second}))
}

// A cap raised at runtime reaches a delivery waiting in the gate, though
// nothing was released (enginetest.FlowChangeBeside).
func TestFlowChangeBesideABroker(t *testing.T) {
	enginetest.FlowChangeBeside(t, memstore.New(nil), memtransport.New(&memtransport.Config{Lease: time.Second}))
}

// The admission cases that apply beside a broker, on the in-memory
// transport and store (enginetest.FlowBroker).
func TestFlowBrokerCases(t *testing.T) {
	enginetest.FlowBroker(t, func(t *testing.T) (store.Store, func() transport.Transport) {
		st := memstore.New(nil)
		bus := memtransport.New(&memtransport.Config{Lease: 500 * time.Millisecond})
		return st, func() transport.Transport { return bus }
	})
}

// Stop gives the deliveries waiting for admission back to the broker at
// once, while the batch in flight finishes: with a lease of an hour,
// another replica then handles them.
func TestStopGivesBackDeliveriesWaitingForAdmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := memstore.New(nil)
	bus := memtransport.New(&memtransport.Config{Lease: time.Hour})
	cfg := func() *idem.Config {
		return &idem.Config{BatchSize: 1, Lanes: 2, Consumers: 2,
			Limits: []idem.Limit{{Name: "api", MessageTypes: []string{"flow.Call"}, Concurrency: 1}}}
	}
	entered, release := make(chan string, 10), make(chan struct{})
	e1 := newEngine(t, st, bus, cfg(), func(ctx context.Context, env idem.Envelope) error {
		entered <- env.ID
		<-release
		return nil
	})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // before e1's Stop, when the test fails
	if err := e1.Publish(ctx, idem.Envelope{ID: "c1", Type: "flow.Call", CorrelationID: "f1"}, idem.Envelope{ID: "c2", Type: "flow.Call", CorrelationID: "f2"}); err != nil {
		t.Fatal(err)
	}
	<-entered // c1 holds the slot
	ready := func(n int) func() (bool, error) {
		return func() (bool, error) {
			r, _, err := bus.Pending(ctx)
			return r == n, err
		}
	}
	enginetest.WaitFor(t, time.Minute, "c2 received, waiting for admission", ready(0))
	stopped := make(chan error, 1)
	go func() { stopped <- e1.Stop(ctx) }()
	enginetest.WaitFor(t, time.Minute, "c2 given back while c1 still runs", ready(1))
	open()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	handled := make(chan string, 10)
	newEngine(t, st, bus, cfg(), func(_ context.Context, env idem.Envelope) error {
		handled <- env.ID
		return nil
	})
	select {
	case id := <-handled:
		if id != "c2" {
			t.Fatalf("the second replica handled %s, want c2", id)
		}
	case <-ctx.Done():
		t.Fatal("c2 not handled by the second replica")
	}
}

// A delivery refused by a rate is decided again when the rate's next
// token is due, not at the next poll (an hour here).
func TestRateRefusalWakesAtTheNextToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	handled := make(chan string, 10)
	e := newEngine(t, memstore.New(nil), memtransport.New(&memtransport.Config{Lease: time.Minute}),
		&idem.Config{BatchSize: 1, Lanes: 2, Consumers: 1, LimitsInterval: time.Hour,
			Limits: []idem.Limit{{Name: "api", MessageTypes: []string{"flow.Call"}, Rate: 50, Burst: 1}}},
		func(_ context.Context, env idem.Envelope) error {
			handled <- env.ID
			return nil
		})
	for i := range 4 {
		if err := e.Publish(ctx, idem.Envelope{ID: fmt.Sprintf("r%d", i), Type: "flow.Call", CorrelationID: fmt.Sprintf("f%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for n := 0; n < 4; n++ {
		select {
		case <-handled:
		case <-ctx.Done():
			t.Fatalf("%d of 4 calls handled under a rate of 50/s: the refused ones were not decided again when a token was due", n)
		}
	}
}

// newEngine starts an engine on st and tr with h as the handler of
// flow.Call, stopped when the test ends.
func newEngine(t *testing.T, st store.Store, tr transport.Transport, cfg *idem.Config, h idem.HandlerFunc) *idem.Engine {
	t.Helper()
	e, err := idem.NewEngine(st, tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Handle("flow.Call", h); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Stop(ctx)
	})
	return e
}

// The same cases with SQLite keeping the limits beside the in-memory
// transport.
func TestFlowBrokerCasesOnSQLite(t *testing.T) {
	enginetest.FlowBroker(t, func(t *testing.T) (store.Store, func() transport.Transport) {
		st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		bus := memtransport.New(&memtransport.Config{Lease: 500 * time.Millisecond})
		return st, func() transport.Transport { return bus }
	})
}

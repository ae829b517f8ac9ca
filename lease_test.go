package idem_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// A handler five leases slow keeps its delivery: the engine extends the
// lease while the batch runs, so the transport never hands the message
// out again, and the handler runs once.
func TestSlowHandlerKeepsItsLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const lease = time.Second
		mem := memtransport.New(&memtransport.Config{Lease: lease})
		defer mem.Close()
		st := memstore.New(nil)
		defer st.Close()
		e, err := idem.NewEngine(st, mem, &idem.Config{Logger: discard, Consumers: 2,
			TimerInterval: time.Hour, RelayInterval: time.Hour, SweepInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		done := make(chan struct{})
		if err := e.Handle(auditType, func(context.Context, idem.Envelope) error {
			if calls.Add(1) == 1 {
				time.Sleep(5 * lease) // the bubble's clock
				close(done)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := e.Publish(ctx, auditEnv("slow-1")); err != nil {
			t.Fatal(err)
		}
		<-done
		synctest.Wait()
		if err := e.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("the handler ran %d times, want 1", n)
		}
		if s := mem.Stats(); s.Redelivered != 0 || mem.Unsettled() != 0 {
			t.Errorf("transport stats %+v, %d unsettled: want no redelivery (the lease ran out while the handler ran) and nothing unsettled", s, mem.Unsettled())
		}
	})
}

// A handler that hangs does not hold its batch for ever: the engine renews
// its lease for Config.MaxLeaseRenewal, then lets it run out, and another
// engine on the same transport takes the message (within one engine the
// key's order keeps a copy behind the hung one). Before the limit,
// nothing is redelivered.
func TestHungHandlerLetsItsLeaseRunOutAtTheLimit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const lease, limit = time.Second, 4 * time.Second
		mem := memtransport.New(&memtransport.Config{Lease: lease})
		defer mem.Close()
		st := memstore.New(nil)
		defer st.Close()
		var calls atomic.Int64
		entered, hung, second := make(chan struct{}), make(chan struct{}), make(chan struct{})
		engine := func() *idem.Engine {
			e, err := idem.NewEngine(st, mem, &idem.Config{Logger: discard, Consumers: 1, MaxLeaseRenewal: limit,
				TimerInterval: time.Hour, RelayInterval: time.Hour, SweepInterval: time.Hour, HeartbeatInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Handle(auditType, func(context.Context, idem.Envelope) error {
				switch calls.Add(1) {
				case 1:
					close(entered)
					<-hung // hangs until the test ends it
				case 2:
					close(second)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			return e
		}
		ctx := context.Background()
		a, b := engine(), engine()
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Publish(ctx, auditEnv("hung-1")); err != nil {
			t.Fatal(err)
		}
		<-entered
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(limit - lease/2) // the bubble's clock: renewed so far
		if n := calls.Load(); n != 1 {
			t.Fatalf("before the renewal limit the handler ran %d times, want 1 (the lease is renewed)", n)
		}
		<-second // past the limit, the lease ran out and the other engine took it
		close(hung)
		synctest.Wait()
		for _, e := range []*idem.Engine{a, b} {
			if err := e.Stop(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if s := mem.Stats(); s.Redelivered == 0 {
			t.Errorf("transport stats %+v: want the hung message redelivered once its renewals stopped", s)
		}
	})
}

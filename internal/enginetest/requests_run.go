package enginetest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginestats"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Requests runs the request and fault scenarios on fresh stores from
// newStore: each store is shared by two engines, one running the orders
// saga and one the bank saga.
func Requests(t *testing.T, newStore func(t *testing.T) store.Store) {
	authorize, authorized := saga.MessageType(Authorize{}), saga.MessageType(Authorized{})
	faultType := saga.FaultType(OrdersType, authorize)
	cases := []struct {
		name string
		run  func(t *testing.T, b *RequestBundle)
	}{
		{"ResponseApplied", func(t *testing.T, b *RequestBundle) {
			b.Publish("place-1", "", Place{OrderID: "o1", Amount: 5})
			b.WaitOrder("o1", "Done", "authorized")
			req := b.ToOrders.Sent(authorize)[0]
			resp := b.ToBank.Sent(authorized)[0]
			if resp.CausationID != req.ID {
				t.Errorf("response caused by %s, want the request %s", resp.CausationID, req.ID)
			}
			if in := b.Order("o1"); len(in.Timers) != 0 {
				t.Errorf("timers %v left after the response: the timeout was not cancelled", in.Timers)
			}
			ts, err := b.St.ListTimers(context.Background(), &store.ListParams{Limit: 10})
			if err != nil || len(ts) != 0 {
				t.Errorf("stored timers %v (%v): want none", ts, err)
			}
		}},
		{"TimeoutFiresAndLateResponseIgnored", func(t *testing.T, b *RequestBundle) {
			b.Publish("place-2", "", Place{OrderID: "o2", Amount: 100})
			req := b.WaitSent(b.ToOrders, authorize, 1)[0]
			b.WaitOrder("o2", "Waiting", "")
			b.Advance(time.Minute)
			if n, err := b.Orders.RunTimers(context.Background()); err != nil || n != 1 {
				t.Fatalf("RunTimers: %d, %v; want 1 timer fired", n, err)
			}
			b.WaitOrder("o2", "TimedOut", "timeout")
			stale := b.Orders.Stats().StaleTimers
			late := b.Publish("late-2", req.ID, Authorized{OrderID: "o2"})
			// The stats are counted just after the commit that makes the
			// inbox record visible: wait for both.
			Eventually(t, func() string {
				if !b.Seen("o2", late) {
					return "late response not consumed"
				}
				if got := b.Orders.Stats().StaleTimers; got != stale+1 {
					return fmt.Sprintf("StaleTimers %d, want %d: the late response was not counted as stale", got, stale+1)
				}
				return ""
			})
			b.WaitOrder("o2", "TimedOut", "timeout")
		}},
		{"SupersededResponseIgnored", func(t *testing.T, b *RequestBundle) {
			b.Publish("place-3", "", Place{OrderID: "o3", Amount: 100})
			first := b.WaitSent(b.ToOrders, authorize, 1)[0]
			b.Publish("retry-3", "", Retry{OrderID: "o3", Amount: 200})
			second := b.WaitSent(b.ToOrders, authorize, 2)[1]
			old := b.Publish("resp-3a", first.ID, Authorized{OrderID: "o3"})
			Eventually(t, func() string {
				if !b.Seen("o3", old) {
					return "superseded response not consumed"
				}
				return ""
			})
			b.WaitOrder("o3", "Waiting", "")
			b.Publish("resp-3b", second.ID, Authorized{OrderID: "o3"})
			b.WaitOrder("o3", "Done", "authorized")
			// The first request's timeout was replaced; the second's
			// cancelled with the response: nothing fires.
			b.Advance(time.Hour)
			if n, err := b.Orders.RunTimers(context.Background()); err != nil || n != 0 {
				t.Errorf("RunTimers: %d, %v; want no timer", n, err)
			}
		}},
		{"MalformedRequestFaultsOnce", func(t *testing.T, b *RequestBundle) {
			b.Publish("place-4", "", Place{OrderID: "o4", Amount: -1})
			b.WaitOrder("o4", "Failed", "fault:"+idem.ReasonMalformed)
			req := b.ToOrders.Sent(authorize)[0]
			// The bank receives the request again and dead-letters it again:
			// the same fault, skipped by the orders saga's inbox.
			dups := b.Orders.Stats().Duplicates
			if err := b.ToBank.Transport.Publish(context.Background(), []idem.Envelope{req}); err != nil {
				t.Fatal(err)
			}
			Eventually(t, func() string {
				if s := b.Bank.Stats(); s.DeadLettered != 2 {
					return fmt.Sprintf("bank dead-lettered %d, want 2", s.DeadLettered)
				}
				if got := b.Orders.Stats().Duplicates; got != dups+1 {
					return fmt.Sprintf("orders duplicates %d, want %d", got, dups+1)
				}
				return ""
			})
			faults := b.ToBank.Sent(faultType)
			if len(faults) != 1 {
				t.Errorf("%d distinct faults published, want 1", len(faults))
			}
			if n := countJournal(t, b.St, "o4", faultType); n != 1 {
				t.Errorf("orders journal holds %d faults, want 1", n)
			}
		}},
		{"ForgedFaultHeadersIgnored", func(t *testing.T, b *RequestBundle) {
			// A fault type that is not the fault of the message's type (it
			// would let a producer inject any message), and a sender key no
			// saga can have: dead-lettered without a fault.
			forged := []map[string]string{
				{transport.HeaderFault: saga.MessageType(Place{}), transport.HeaderSagaType: OrdersType, transport.HeaderSagaKey: "o6"},
				{transport.HeaderFault: faultType, transport.HeaderSagaType: OrdersType, transport.HeaderSagaKey: " o6\u202e<script>"},
				{transport.HeaderFault: faultType, transport.HeaderSagaType: OrdersType, transport.HeaderSagaKey: strings.Repeat("k", 1<<12)},
			}
			for i, h := range forged {
				env, err := b.Bank.NewEnvelope(fmt.Sprintf("forged-%d", i), Authorize{OrderID: "o6", Amount: -1})
				if err != nil {
					t.Fatal(err)
				}
				env.Headers = h
				if err := b.ToBank.Transport.Publish(context.Background(), []idem.Envelope{env}); err != nil {
					t.Fatal(err)
				}
			}
			Eventually(t, func() string {
				if n := b.Bank.Stats().DeadLettered; n != int64(len(forged)) {
					return fmt.Sprintf("bank dead-lettered %d, want %d", n, len(forged))
				}
				return ""
			})
			if s := b.Bank.Stats(); s.Emitted != 0 {
				t.Errorf("bank emitted %d messages for forged headers, want none", s.Emitted)
			}
		}},
		{"FailingRequestFaults", func(t *testing.T, b *RequestBundle) {
			b.Publish("place-5", "", Place{OrderID: "o5", Amount: 0})
			b.WaitOrder("o5", "Failed", "fault:"+idem.ReasonPermanent)
			dls, err := b.St.ListDeadLetters(context.Background(), &store.ListParams{Limit: 10})
			if err != nil || len(dls) != 1 || dls[0].SagaType != BankType {
				t.Errorf("dead letters %+v (%v): want the bank's one", dls, err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, NewRequestBundle(t, newStore(t)))
		})
	}
}

// countJournal counts the journal entries of sagaType orders, key, with
// event type typ.
func countJournal(t *testing.T, st store.Store, key, typ string) int {
	t.Helper()
	js, err := st.Journal(context.Background(), store.Key{SagaType: OrdersType, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, j := range js {
		if j.EventType == typ {
			n++
		}
	}
	return n
}

// RequestsOnQueue runs a request and its fault with q as the store and
// the transport of two engines that both run the orders and bank sagas:
// the fault is enqueued in the transaction that records the dead letter
// and consumes the request, and a second dead-lettering of the request
// yields the same fault, which the orders saga skips.
func RequestsOnQueue(t *testing.T, q store.Queue) {
	authorize := saga.MessageType(Authorize{})
	b := &RequestBundle{t: t, St: q, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var engines []*idem.Engine
	for range 2 {
		e, err := idem.NewEngine(q, q, &idem.Config{
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: b.clock,
			RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond,
			TimerInterval: time.Hour, SweepInterval: time.Hour, RelayInterval: time.Hour,
		})
		if err != nil {
			t.Fatal(err)
		}
		orders, _ := OrdersMachine()
		for _, m := range []idem.Machine{orders, BankMachine()} {
			if err := e.Register(m); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, e := range engines {
			if err := e.Stop(ctx); err != nil {
				t.Errorf("Stop: %v", err)
			}
		}
	})
	b.Orders = engines[0]
	b.Publish("place-ok", "", Place{OrderID: "ok", Amount: 5})
	b.Publish("place-bad", "", Place{OrderID: "bad", Amount: -1})
	b.WaitOrder("ok", "Done", "authorized")
	b.WaitOrder("bad", "Failed", "fault:"+idem.ReasonMalformed)

	dls, err := q.ListDeadLetters(context.Background(), &store.ListParams{Limit: 10})
	if err != nil || len(dls) != 1 || dls[0].Envelope.Type != authorize {
		t.Fatalf("dead letters %+v (%v): want the malformed request", dls, err)
	}
	dups := enginestats.Sum(engines...).Duplicates
	if err := b.Orders.Publish(context.Background(), dls[0].Envelope); err != nil {
		t.Fatal(err)
	}
	Eventually(t, func() string {
		s := enginestats.Sum(engines...)
		if s.DeadLettered != 2 || s.Duplicates != dups+1 {
			return fmt.Sprintf("dead-lettered %d, duplicates %d; want 2, %d", s.DeadLettered, s.Duplicates, dups+1)
		}
		return ""
	})
	if n := countJournal(t, q, "bad", saga.FaultType(OrdersType, authorize)); n != 1 {
		t.Errorf("orders journal holds %d faults, want 1", n)
	}
}

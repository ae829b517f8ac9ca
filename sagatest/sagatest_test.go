package sagatest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/sagatest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// TestMain checks that the harness's cleanup stops every engine it started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// ---------------------------------------------------------------------------
// recorder: a testing.TB that records failures instead of failing the test,
// so that the harness's own failure messages can be checked.
// ---------------------------------------------------------------------------

type recorder struct {
	testing.TB // the real test: Log, Name, TempDir, … pass through

	mu     sync.Mutex
	errs   []string // Errorf and Error
	fatals []string // Fatalf and Fatal
}

func newRecorder(t *testing.T) *recorder { return &recorder{TB: t} }

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.record(&r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Error(args ...any) {
	r.record(&r.errs, fmt.Sprint(args...))
}

// Fatalf records and ends the calling goroutine, like testing.T.Fatalf;
// call harness methods that may fail fatally through r.run.
func (r *recorder) Fatalf(format string, args ...any) {
	r.record(&r.fatals, fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.record(&r.fatals, fmt.Sprint(args...))
	runtime.Goexit()
}

func (r *recorder) FailNow() {
	r.record(&r.fatals, "FailNow")
	runtime.Goexit()
}

// Cleanup registers fn on the real test; a failure fn records (an engine
// that does not stop) is reported on the real test.
func (r *recorder) Cleanup(fn func()) {
	r.TB.Cleanup(func() {
		errs, fatals := r.take()
		fn()
		errs2, fatals2 := r.take()
		for _, m := range append(errs2, fatals2...) {
			r.TB.Errorf("harness cleanup: %s", m)
		}
		r.mu.Lock()
		r.errs, r.fatals = errs, fatals
		r.mu.Unlock()
	})
}

func (r *recorder) record(to *[]string, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*to = append(*to, msg)
}

// take returns and forgets what was recorded.
func (r *recorder) take() (errs, fatals []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	errs, fatals = r.errs, r.fatals
	r.errs, r.fatals = nil, nil
	return errs, fatals
}

// run calls fn on a goroutine of its own, so that a recorded Fatalf ends fn
// and not the test.
func (r *recorder) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

// expect checks that exactly the messages want were recorded by Errorf (and
// nothing by Fatalf) since the last take.
func (r *recorder) expect(t *testing.T, want ...string) {
	t.Helper()
	errs, fatals := r.take()
	if len(fatals) > 0 {
		t.Errorf("fatal failures: got %q, want none", fatals)
	}
	if !slices.Equal(errs, want) {
		t.Errorf("failure messages:\n got %q\nwant %q", errs, want)
	}
}

// expectFatal checks that exactly one Fatalf was recorded, containing every
// fragment of want, and no Errorf.
func (r *recorder) expectFatal(t *testing.T, want ...string) {
	t.Helper()
	errs, fatals := r.take()
	if len(errs) > 0 {
		t.Errorf("non-fatal failures: got %q, want none", errs)
	}
	if len(fatals) != 1 {
		t.Fatalf("fatal failures: got %q, want exactly one", fatals)
	}
	for _, w := range want {
		if !strings.Contains(fatals[0], w) {
			t.Errorf("fatal failure message %q: want it to contain %q", fatals[0], w)
		}
	}
}

// placedOrder returns a harness on the order machine of examples/orders,
// reporting to a recorder, with order 42 placed (AwaitingPayment).
func placedOrder(t *testing.T, opts *sagatest.Options) (*sagatest.Harness[orders.Order], *recorder) {
	t.Helper()
	r := newRecorder(t)
	h := sagatest.New(r, orders.OrderMachine(), opts)
	h.Deliver("placed-42", orders.OrderPlaced{OrderID: "42", Items: 3})
	h.Settle()
	r.expect(t) // setup itself reported nothing
	return h, r
}

// ---------------------------------------------------------------------------
// Assertions: silent when they hold, "got … want …" naming the saga, the
// key or the message type when they do not.
// ---------------------------------------------------------------------------

func TestAssertStateReportsGotWant(t *testing.T) {
	h, r := placedOrder(t, nil)
	tests := []struct {
		name string
		key  string
		want saga.State
		msg  []string // nil: no failure
	}{
		{name: "holds", key: "42", want: "AwaitingPayment"},
		{name: "other state", key: "42", want: "Shipped", msg: []string{"saga order/42: got state AwaitingPayment, want Shipped"}},
		{name: "no saga", key: "7", want: "AwaitingPayment", msg: []string{"saga order/7: got no saga, want state AwaitingPayment"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.AssertState(tt.key, tt.want)
			r.expect(t, tt.msg...)
		})
	}
}

func TestAssertNoSagaReportsGotWant(t *testing.T) {
	h, r := placedOrder(t, nil)

	h.AssertNoSaga("7")
	r.expect(t)

	h.AssertNoSaga("42")
	r.expect(t, "saga order/42: got state AwaitingPayment, want no saga")
}

func TestAssertEmittedCountReportsGotWant(t *testing.T) {
	h, r := placedOrder(t, nil)
	h.Deliver("paid-42", orders.PaymentReceived{OrderID: "42", Amount: 30})
	h.Settle()
	ships := h.EmittedOf("orders.ShipOrder")
	if len(ships) != 1 {
		t.Fatalf("EmittedOf(orders.ShipOrder): got %d messages, want 1", len(ships))
	}
	id := ships[0].ID

	tests := []struct {
		name    string
		msgType string
		want    int
		msg     []string
	}{
		{name: "holds", msgType: "orders.ShipOrder", want: 1},
		{name: "holds at zero", msgType: "orders.Refund", want: 0},
		{name: "too few", msgType: "orders.ShipOrder", want: 2,
			msg: []string{fmt.Sprintf("emitted orders.ShipOrder: got 1 distinct messages [%s], want 2 (emitted types: [orders.ShipOrder])", id)}},
		{name: "too many", msgType: "orders.ShipOrder", want: 0,
			msg: []string{fmt.Sprintf("emitted orders.ShipOrder: got 1 distinct messages [%s], want 0 (emitted types: [orders.ShipOrder])", id)}},
		{name: "never emitted", msgType: "orders.Refund", want: 1,
			msg: []string{"emitted orders.Refund: got 0 distinct messages [], want 1 (emitted types: [orders.ShipOrder])"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.AssertEmittedCount(tt.msgType, tt.want)
			r.expect(t, tt.msg...)
		})
	}
}

func TestAssertDeadLettersReportsGotWant(t *testing.T) {
	r := newRecorder(t)
	h := sagatest.New(r, orders.OrderMachine(), nil)

	h.AssertDeadLetters()
	r.expect(t)
	h.AssertDeadLetters(idem.ReasonMalformed)
	r.expect(t, "dead letters: got reasons [], want [malformed_body]; dead letters: []")

	h.DeliverEnvelope(idem.Envelope{ID: "bad-json", Type: "orders.OrderPlaced", Body: []byte(`{"OrderID":`)}, 1)
	h.DeliverEnvelope(idem.Envelope{ID: "bad-key", Type: "orders.PaymentReceived", Body: []byte(`{"OrderID":" "}`)}, 1)
	h.Settle()
	r.expect(t)

	tests := []struct {
		name string
		want []string
		msg  []string
	}{
		{name: "holds", want: []string{idem.ReasonMalformed, idem.ReasonInvalidKey}},
		{name: "holds in any order", want: []string{idem.ReasonInvalidKey, idem.ReasonMalformed}},
		{name: "missing one", want: []string{idem.ReasonMalformed},
			msg: []string{"dead letters: got reasons [invalid_key malformed_body], want [malformed_body]; dead letters: [bad-json (orders.OrderPlaced): malformed_body bad-key (orders.PaymentReceived): invalid_key]"}},
		{name: "one too many", want: []string{idem.ReasonMalformed, idem.ReasonInvalidKey, idem.ReasonMalformed},
			msg: []string{"dead letters: got reasons [invalid_key malformed_body], want [invalid_key malformed_body malformed_body]; dead letters: [bad-json (orders.OrderPlaced): malformed_body bad-key (orders.PaymentReceived): invalid_key]"}},
		{name: "none expected", want: nil,
			msg: []string{"dead letters: got reasons [invalid_key malformed_body], want []; dead letters: [bad-json (orders.OrderPlaced): malformed_body bad-key (orders.PaymentReceived): invalid_key]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.AssertDeadLetters(tt.want...)
			r.expect(t, tt.msg...)
		})
	}
}

// ---------------------------------------------------------------------------
// Fatal failures of the kit: what a user sees when the harness cannot do
// what was asked.
// ---------------------------------------------------------------------------

// Charge is the message of the payment machine below.
type Charge struct{ PaymentID string }

// paymentMachine never completes a charge: its handler asks for a retry in
// an hour, so the message stays pending.
func paymentMachine() *saga.Machine[struct{}] {
	m := saga.New[struct{}]("payment")
	done := m.Final("Charged")
	charge := saga.NewEvent[Charge](m, func(c Charge) string { return c.PaymentID })
	m.Initially(saga.When(charge).Then(func(*saga.Context[struct{}], Charge) error {
		return idem.RetryAfter(time.Hour, errors.New("card service unavailable"))
	}).TransitionTo(done))
	return m
}

func TestSettleReportsPendingMessagesAfterTimeout(t *testing.T) {
	r := newRecorder(t)
	h := sagatest.New(r, paymentMachine(), &sagatest.Options{Timeout: 50 * time.Millisecond})
	h.Deliver("charge-1", Charge{PaymentID: "p-1"})

	r.run(h.Settle)
	r.expectFatal(t, "sagatest: 1 messages still pending after 50ms", "Delayed:1")
	h.AssertNoSaga("p-1")
	r.expect(t)
}

func TestDeliverReportsInvalidEnvelope(t *testing.T) {
	r := newRecorder(t)
	h := sagatest.New(r, orders.OrderMachine(), nil)

	r.run(func() { h.Deliver("", orders.OrderPlaced{OrderID: "42"}) })
	r.expectFatal(t, "sagatest: deliver", "invalid envelope: empty ID")

	r.run(func() { h.DeliverEnvelope(idem.Envelope{Type: "orders.OrderPlaced", Body: []byte(`{}`)}, 1) })
	r.expectFatal(t, `sagatest: deliver ""`, "missing id")

	r.run(func() { h.DeliverEnvelope(idem.Envelope{ID: "no-type", Body: []byte(`{}`)}, 1) })
	r.expectFatal(t, `sagatest: deliver "no-type"`, "missing type")
}

func TestNewReportsEngineThatCannotStart(t *testing.T) {
	r := newRecorder(t)
	r.run(func() { sagatest.New(r, saga.New[struct{}]("empty"), nil) })
	r.expectFatal(t, "sagatest: register empty:", "binds no message type: bind events with saga.NewEvent")
}

// ---------------------------------------------------------------------------
// Behaviour of the kit.
// ---------------------------------------------------------------------------

func TestDeliverCopiesOnReplicasAppliesOnce(t *testing.T) {
	r := newRecorder(t)
	h := sagatest.New(r, orders.OrderMachine(), &sagatest.Options{Copies: 3, Replicas: 3})
	if len(h.Engines) != 3 {
		t.Fatalf("Engines: got %d, want 3", len(h.Engines))
	}
	h.Deliver("placed-42", orders.OrderPlaced{OrderID: "42", Items: 3})
	h.Settle()
	h.Deliver("paid-42", orders.PaymentReceived{OrderID: "42", Amount: 30})
	h.Settle()
	h.DeliverN("paid-42", orders.PaymentReceived{OrderID: "42", Amount: 30}, 2) // a late redelivery
	h.Settle()

	h.AssertState("42", "Shipped")
	h.AssertEmittedCount("orders.ShipOrder", 1)
	h.AssertDeadLetters()
	r.expect(t)

	if got := h.Mem.Stats().Published; got != 8 {
		t.Errorf("transport Published: got %d, want 8 (3+3+2 copies)", got)
	}
	s := h.Stats()
	if s.Applied != 2 || s.Duplicates != 6 {
		t.Errorf("Stats: got Applied %d, Duplicates %d, want 2 and 6; %+v", s.Applied, s.Duplicates, s)
	}
	j, err := h.Store.Journal(context.Background(), store.Key{SagaType: "order", Key: "42"})
	if err != nil {
		t.Fatalf("journal: %v", err)
	}
	var ids []string
	for _, e := range j {
		ids = append(ids, e.MessageID)
	}
	if want := []string{"placed-42", "paid-42"}; !slices.Equal(ids, want) {
		t.Errorf("journal message IDs: got %v, want %v", ids, want)
	}

	state, data, ok := h.State("42")
	if !ok || state != "Shipped" || data != (orders.Order{Items: 3, Paid: 30}) {
		t.Errorf("State(42): got %s, %+v, %v, want Shipped, {Items:3 Paid:30}, true", state, data, ok)
	}
	if _, _, ok := h.State("7"); ok {
		t.Errorf("State(7): got ok, want no saga")
	}
}

func TestAdvanceFiresDueTimersOnly(t *testing.T) {
	start := time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)
	h, r := placedOrder(t, &sagatest.Options{Start: start})

	h.Advance(23 * time.Hour)
	h.AssertState("42", "AwaitingPayment")
	r.expect(t)
	if got := h.Stats().TimersFired; got != 0 {
		t.Errorf("TimersFired after 23h: got %d, want 0", got)
	}

	h.Advance(time.Hour) // the overdue timer is due at exactly 24h
	h.AssertState("42", "Cancelled")
	h.AssertEmittedCount("orders.ShipOrder", 0)
	r.expect(t)
	if got := h.Stats().TimersFired; got != 1 {
		t.Errorf("TimersFired after 24h: got %d, want 1", got)
	}

	h.Advance(48 * time.Hour)
	if got := h.Stats().TimersFired; got != 1 {
		t.Errorf("TimersFired after 72h: got %d, want 1 (a timer fires once)", got)
	}
	if got, want := h.Now(), start.Add(72*time.Hour); !got.Equal(want) {
		t.Errorf("Now: got %s, want %s", got, want)
	}
}

func TestAdvanceAfterUnscheduleFiresNothing(t *testing.T) {
	h, r := placedOrder(t, nil)
	h.Deliver("paid-42", orders.PaymentReceived{OrderID: "42", Amount: 30})
	h.Settle()
	h.Advance(48 * time.Hour)
	h.AssertState("42", "Shipped")
	r.expect(t)
	if s := h.Stats(); s.TimersFired != 0 {
		t.Errorf("TimersFired: got %d, want 0 (Unschedule deleted the timer)", s.TimersFired)
	}
}

func TestEmittedDeduplicatesByID(t *testing.T) {
	r := newRecorder(t)
	h := sagatest.New(r, orders.OrderMachine(), nil)
	ship := func(id string) idem.Envelope {
		env, err := idem.NewEnvelope(id, orders.ShipOrder{OrderID: "42"})
		if err != nil {
			t.Fatal(err)
		}
		// As the engine emits it: with the emitting saga's headers.
		env.Headers = map[string]string{transport.HeaderSagaType: "order", transport.HeaderSagaKey: "42"}
		return env
	}
	// What a relay re-send after a lost MarkSent looks like: the same ID
	// published again, here through the engine as an outbox would.
	ctx := context.Background()
	for _, id := range []string{"ship-1", "ship-2", "ship-1", "ship-1"} {
		if err := h.Engines[0].Publish(ctx, ship(id)); err != nil {
			t.Fatal(err)
		}
	}
	h.Settle()

	var got []string
	for _, e := range h.Emitted() {
		got = append(got, e.ID)
	}
	if want := []string{"ship-1", "ship-2"}; !slices.Equal(got, want) {
		t.Errorf("Emitted IDs: got %v, want %v (first publication first)", got, want)
	}
	if got := len(h.EmittedOf("orders.ShipOrder")); got != 2 {
		t.Errorf("EmittedOf(orders.ShipOrder): got %d, want 2", got)
	}
	h.AssertEmittedCount("orders.ShipOrder", 2)
	r.expect(t)

	// Messages the machine consumes are delivered to it, not captured.
	h.Deliver("placed-42", orders.OrderPlaced{OrderID: "42"})
	h.Settle()
	if got := len(h.Emitted()); got != 2 {
		t.Errorf("Emitted after delivering a consumed type: got %d messages, want 2", got)
	}
}

func TestDeliverEnvelopeDeadLettersBadInput(t *testing.T) {
	tests := []struct {
		name   string
		env    idem.Envelope
		reason string
		saga   string // DeadLetter.SagaType
	}{
		{"malformed body", idem.Envelope{ID: "m-1", Type: "orders.OrderPlaced", Body: []byte(`{"OrderID": 42`)}, idem.ReasonMalformed, ""},
		{"wrong field type", idem.Envelope{ID: "m-2", Type: "orders.OrderPlaced", Body: []byte(`{"OrderID": 42}`)}, idem.ReasonMalformed, ""},
		{"empty key", idem.Envelope{ID: "m-3", Type: "orders.OrderPlaced", Body: []byte(`{"OrderID": ""}`)}, idem.ReasonInvalidKey, "order"},
		{"control character in key", idem.Envelope{ID: "m-4", Type: "orders.OrderPlaced", Body: []byte(`{"OrderID": "4\u00002"}`)}, idem.ReasonInvalidKey, "order"},
		{"oversized body", idem.Envelope{ID: "m-5", Type: "orders.OrderPlaced", Body: []byte(`{"OrderID": "42", "Items": 100000000}`)}, idem.ReasonOversized, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRecorder(t)
			h := sagatest.New(r, orders.OrderMachine(), &sagatest.Options{Engine: idem.Config{MaxBodyBytes: 32}})
			env := tt.env.Clone()
			h.DeliverEnvelope(env, 3) // three copies: one dead letter
			h.Settle()
			h.AssertDeadLetters(tt.reason)
			h.AssertNoSaga("42")
			r.expect(t)

			if !equalEnvelope(env, tt.env) {
				t.Errorf("DeliverEnvelope modified its argument: got %+v, want %+v", env, tt.env)
			}
			dls := h.DeadLetters()
			if len(dls) != 1 {
				t.Fatalf("DeadLetters: got %d, want 1", len(dls))
			}
			dl := dls[0]
			if dl.ID != tt.env.ID || dl.Envelope.ID != tt.env.ID || string(dl.Envelope.Body) != string(tt.env.Body) {
				t.Errorf("dead letter: got ID %q, envelope %q %s, want %q and the envelope as sent", dl.ID, dl.Envelope.ID, dl.Envelope.Body, tt.env.ID)
			}
			if dl.SagaType != tt.saga || dl.Error == "" || dl.Attempts != 1 {
				t.Errorf("dead letter: got saga type %q, error %q, attempts %d, want %q, an error, 1", dl.SagaType, dl.Error, dl.Attempts, tt.saga)
			}
		})
	}
}

func equalEnvelope(a, b idem.Envelope) bool {
	return a.ID == b.ID && a.Type == b.Type && string(a.Body) == string(b.Body) && a.SentAt.Equal(b.SentAt) && len(a.Headers) == len(b.Headers)
}

func TestStringNamesTheHarness(t *testing.T) {
	h := sagatest.New(t, orders.OrderMachine(), &sagatest.Options{Copies: 2, Replicas: 3})
	if got, want := h.String(), "sagatest harness for order (3 replicas, 2 copies)"; got != want {
		t.Errorf("String: got %q, want %q", got, want)
	}
}

// ---------------------------------------------------------------------------
// Regressions: bugs found in review, each test states the correct
// behaviour.
// ---------------------------------------------------------------------------

// DeliverEnvelope is documented for malformed input, but an envelope of a
// type the machine does not consume goes through the capture, which takes
// it for a message the saga emitted: it never reaches the engine.
func TestDeliverEnvelopeOfUnknownTypeIsDeadLettered(t *testing.T) {
	h := sagatest.New(t, orders.OrderMachine(), nil)
	h.DeliverEnvelope(idem.Envelope{ID: "u-1", Type: "orders.Unknown", Body: []byte(`{}`)}, 1)
	h.Settle()
	h.AssertDeadLetters(idem.ReasonUnknownType)
	h.AssertEmittedCount("orders.Unknown", 0)
}

// Start asks for Ping to reach saga "b" in an hour. The engine treats any
// message with an idem-timer header as a timer of the saga it correlates to,
// finds no live timer "ping" on "b", and drops it as stale: silently lost.
type Start struct{ Key, Peer string }

// Ping is the timer message of the peer machine.
type Ping struct{ Key string }

func peerMachine() *saga.Machine[struct{}] {
	m := saga.New[struct{}]("peer")
	waiting, pinged := m.State("Waiting"), m.Final("Pinged")
	start := saga.NewEvent[Start](m, func(s Start) string { return s.Key })
	ping := saga.NewEvent[Ping](m, func(p Ping) string { return p.Key })
	m.Initially(
		saga.When(start).Then(func(c *saga.Context[struct{}], s Start) error {
			c.Schedule("ping", time.Hour, Ping{Key: s.Peer})
			return nil
		}).TransitionTo(waiting),
		saga.When(ping).TransitionTo(pinged))
	m.During(waiting, saga.Ignore(start), saga.When(ping).TransitionTo(pinged))
	return m
}

func TestTimerForAnotherSagaIsDelivered(t *testing.T) {
	h := sagatest.New(t, peerMachine(), nil)
	h.Deliver("start-a", Start{Key: "a", Peer: "b"})
	h.Settle()
	h.Advance(2 * time.Hour)
	if s := h.Stats(); s.TimersFired != 1 || s.StaleTimers != 0 {
		t.Errorf("Stats: got TimersFired %d, StaleTimers %d, want 1 and 0", s.TimersFired, s.StaleTimers)
	}
	h.AssertState("b", "Pinged")
}

// Two messages of one key applied in one batch get the same journal
// Version, so the journal has no order of its own (storetest treats the
// version as the commit order).
func TestJournalKeepsOrderWithinABatch(t *testing.T) {
	h := sagatest.New(t, orders.OrderMachine(), nil)
	placed, err := h.Engines[0].NewEnvelope("placed-42", orders.OrderPlaced{OrderID: "42"})
	if err != nil {
		t.Fatal(err)
	}
	paid, err := h.Engines[0].NewEnvelope("paid-42", orders.PaymentReceived{OrderID: "42", Amount: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Engines[0].Publish(context.Background(), placed, paid); err != nil { // one batch
		t.Fatal(err)
	}
	h.Settle()
	h.AssertState("42", "Shipped")
	j, err := h.Store.Journal(context.Background(), store.Key{SagaType: "order", Key: "42"})
	if err != nil {
		t.Fatal(err)
	}
	// One commit applied both: the entries share the version the commit
	// produced and keep their order of insertion.
	var steps []string
	for _, e := range j {
		steps = append(steps, fmt.Sprintf("%s->%s@v%d", e.FromState, e.ToState, e.Version))
	}
	if want := []string{"Initial->AwaitingPayment@v1", "AwaitingPayment->Shipped@v1"}; !slices.Equal(steps, want) {
		t.Errorf("journal: got %v, want %v", steps, want)
	}
}

// slowAck publishes, then returns only once the consumers have settled what
// it published: a broker whose publish confirmation arrives late.
type slowAck struct {
	transport.Transport
	pending func() int
}

func (s *slowAck) Publish(ctx context.Context, msgs []transport.Envelope) error {
	if err := s.Transport.Publish(ctx, msgs); err != nil {
		return err
	}
	for deadline := time.Now().Add(5 * time.Second); s.pending() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
	return nil
}

// ReplayDeadLetter publishes, then deletes the dead letter by ID. If the
// replayed message fails again before the delete, the delete removes the new
// dead letter: the message is neither applied nor dead-lettered.
func TestReplayDeadLetterKeepsTheNewDeadLetter(t *testing.T) {
	h := sagatest.New(t, orders.OrderMachine(), nil)
	h.DeliverEnvelope(idem.Envelope{ID: "bad-1", Type: "orders.OrderPlaced", Body: []byte(`{`)}, 1)
	h.Settle()
	h.AssertDeadLetters(idem.ReasonMalformed)

	ops, err := idem.NewEngine(h.Store, &slowAck{Transport: h.Mem, pending: h.Mem.Unsettled}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ops.ReplayDeadLetter(context.Background(), "bad-1"); err != nil {
		t.Fatal(err)
	}
	h.Settle()
	h.AssertDeadLetters(idem.ReasonMalformed) // still malformed: it must still be there
}

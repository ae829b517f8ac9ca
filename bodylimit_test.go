package idem_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// limited is a transport that carries bodies of at most max bytes.
type limited struct {
	transport.Transport
	max int
}

func (l limited) MaxMessageBytes() int { return l.max }

// A transport's own limit lowers the default MaxBodyBytes, and an explicit
// MaxBodyBytes above it stops start-up with a message that says what to do.
func TestBodyLimitFitsTheTransport(t *testing.T) {
	tr := limited{memtransport.New(nil), 1000}
	defer tr.Close()
	_, err := idem.NewEngine(memstore.New(nil), tr, &idem.Config{MaxBodyBytes: 2000})
	if err == nil || !strings.Contains(err.Error(), "MaxBodyBytes is 2000") || !strings.Contains(err.Error(), "1000 or less") {
		t.Fatalf("NewEngine(MaxBodyBytes 2000 on a 1000-byte transport): got %v, want an error naming both limits", err)
	}
	if _, err := idem.NewEngine(memstore.New(nil), tr, &idem.Config{MaxBodyBytes: 1000}); err != nil {
		t.Fatalf("NewEngine(MaxBodyBytes 1000 on a 1000-byte transport): %v", err)
	}

	// The default is lowered: a 1,500-byte body is dead-lettered as
	// oversized instead of being accepted (1 MiB) and emitted beyond what
	// the transport can carry.
	b := setup(t, &options{noStart: true})
	e, err := idem.NewEngine(b.st, limited{b.rec, 1000}, &idem.Config{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(newCounter(nil)); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.engines = []*idem.Engine{e}
	b.publish(idem.Envelope{ID: "big", Type: incType, Body: []byte(`{"key":"k","n":1,"pad":"` + strings.Repeat("x", 1500) + `"}`)})
	b.settle()
	b.stop()
	if dls := b.deadLetters(); len(dls) != 1 || dls[0].Reason != idem.ReasonOversized {
		t.Fatalf("dead letters %+v, want the 1,500-byte message as %s", dls, idem.ReasonOversized)
	}
}

// Big is an emitted event whose size the test chooses.
type Big struct {
	Key string `json:"key"`
	Pad string `json:"pad"`
}

// A saga that emits a body over MaxBodyBytes fails the message that caused
// it, permanently: no consumer would accept the emission, and a transport
// might refuse it and block the outbox.
func TestOversizedEmissionIsDeadLettered(t *testing.T) {
	m := saga.New[Counter]("emitter")
	open := m.State("Open")
	inc := saga.NewEvent[Inc](m, func(e Inc) string { return e.Key })
	m.Initially(saga.When(inc).Then(func(c *saga.Context[Counter], e Inc) error {
		c.Publish(Big{Key: e.Key, Pad: strings.Repeat("x", e.N)})
		return nil
	}).TransitionTo(open))
	m.During(open, saga.Ignore(inc))

	consumed := func(context.Context, idem.Envelope) error { return nil }
	b := setup(t, &options{machine: m, cfg: idem.Config{MaxBodyBytes: 500},
		handlers: map[string]idem.HandlerFunc{saga.MessageType(Big{}): consumed}})
	b.send("small", Inc{Key: "a", N: 100})
	b.send("big", Inc{Key: "b", N: 600})
	b.settle()
	b.stop()

	dls := b.deadLetters()
	if len(dls) != 1 || dls[0].Envelope.ID != "big" || dls[0].Reason != idem.ReasonPermanent ||
		!strings.Contains(dls[0].Error, "over the limit of 500") {
		t.Fatalf("dead letters %+v, want message big as %s naming the limit", dls, idem.ReasonPermanent)
	}
	if ins := b.instances(); len(ins) != 1 || ins[0].Key != "a" {
		t.Errorf("sagas %+v, want only a: the transition that emitted the oversized body must not commit, the other must", ins)
	}
}

// A message ID (or idempotency key) over MaxIDBytes is dead-lettered: it
// would be copied onto every emission as the causation ID. One of exactly
// MaxIDBytes is accepted. A traceparent too long to be a trace context is
// not copied onto emissions.
func TestIDAndTraceParentBounds(t *testing.T) {
	b := setup(t, nil)
	long := strings.Repeat("i", idem.MaxIDBytes+1)
	ok := strings.Repeat("j", idem.MaxIDBytes)
	env := func(id string, key string) idem.Envelope {
		e := b.env(id, Inc{Key: key, N: 1})
		e.Headers = map[string]string{transport.HeaderTraceParent: "00-" + strings.Repeat("a", 200)}
		return e
	}
	withKey := env("idem-key", "c")
	withKey.IdempotencyKey = strings.Repeat("k", idem.MaxIDBytes+1)
	b.publish(env(long, "a"), env(ok, "b"), withKey)
	b.settle()
	b.stop()

	dls := b.deadLetters()
	if len(dls) != 2 {
		t.Fatalf("dead letters %+v, want the over-long ID and the over-long idempotency key", dls)
	}
	for _, dl := range dls {
		if dl.Reason != idem.ReasonInvalidID || !strings.Contains(dl.Error, "exceeds the limit of 512") {
			t.Errorf("dead letter %s: reason %q error %q, want %s naming the limit", dl.ID, dl.Reason, dl.Error, idem.ReasonInvalidID)
		}
	}
	if ins := b.instances(); len(ins) != 1 || ins[0].Key != "b" {
		t.Fatalf("sagas %+v, want only b (an ID of exactly MaxIDBytes is accepted)", ins)
	}
	sent := b.rec.sent(incrementedType)
	if len(sent) != 1 {
		t.Fatalf("emitted %d Incremented, want 1", len(sent))
	}
	if tp, found := sent[0].Headers[transport.HeaderTraceParent]; found {
		t.Errorf("emission carries a %d-byte traceparent, want it dropped", len(tp))
	}
}

// tooLarge refuses, as too large, every batch holding a message of one
// type, as a broker with a size limit would.
type tooLarge struct {
	transport.Transport
	typ string
}

func (l tooLarge) Publish(ctx context.Context, msgs []idem.Envelope) error {
	for _, m := range msgs {
		if m.Type == l.typ {
			return fmt.Errorf("test broker: %s: %w", m.ID, transport.ErrTooLarge)
		}
	}
	return l.Transport.Publish(ctx, msgs)
}

// An outbox message the transport refuses as too large is dead-lettered by
// the relay (undeliverable), and the others of its batch are sent, instead
// of the whole batch failing on every pass.
func TestRelaySetsAsideWhatTheTransportCannotCarry(t *testing.T) {
	m := saga.New[Counter]("emitter")
	open := m.State("Open")
	inc := saga.NewEvent[Inc](m, func(e Inc) string { return e.Key })
	m.Initially(saga.When(inc).Then(func(c *saga.Context[Counter], e Inc) error {
		c.Publish(Note{Key: e.Key})
		c.Publish(Big{Key: e.Key})
		return nil
	}).TransitionTo(open))
	m.During(open, saga.Ignore(inc))

	b := setup(t, &options{machine: m, noStart: true})
	e, err := idem.NewEngine(b.st, tooLarge{b.rec, saga.MessageType(Big{})}, &idem.Config{Logger: discard, Clock: b.clock.Now, RelayInterval: time.Hour, TimerInterval: time.Hour, SweepInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(m); err != nil {
		t.Fatal(err)
	}
	consumed := func(context.Context, idem.Envelope) error { return nil }
	for _, typ := range []string{noteType, saga.MessageType(Big{})} {
		if err := e.Handle(typ, consumed); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.engines = []*idem.Engine{e}
	b.send("m-1", Inc{Key: "a", N: 1})
	b.settle()
	if got := len(b.rec.sent(noteType)); got != 0 {
		t.Fatalf("Note sent %d times before the relay, want 0: its batch with Big was refused", got)
	}

	n, err := e.RelayOutbox(b.ctx, 0)
	if err != nil {
		t.Fatalf("RelayOutbox: %v, want the refused message set aside", err)
	}
	if n != 2 || len(b.rec.sent(noteType)) != 1 {
		t.Errorf("relayed %d, Note sent %d times; want 2 rows settled and Note sent once", n, len(b.rec.sent(noteType)))
	}
	dls := b.deadLetters()
	if len(dls) != 1 || dls[0].Reason != idem.ReasonUndeliverable || dls[0].Envelope.Type != saga.MessageType(Big{}) || dls[0].Key != "a" {
		t.Fatalf("dead letters %+v, want Big as %s for saga a", dls, idem.ReasonUndeliverable)
	}
	if n, err := e.RelayOutbox(b.ctx, 0); err != nil || n != 0 {
		t.Errorf("second relay: %d rows, %v; want an empty outbox", n, err)
	}
	b.stop()
}

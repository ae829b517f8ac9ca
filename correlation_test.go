package idem_test

import (
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// A message emitted for a type no saga of the engine consumes (a plain
// handler's command, another engine's saga) carries the correlation ID of
// the message that caused it; without one, the emitting saga's key. The
// saga's own timers keep its key.
func TestEmissionsCarryTheCorrelationID(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// Published through the engine: the correlation ID is the counter's key.
	b.send("m-1", Inc{Key: "k-1", N: 1})
	// A producer's own correlation ID (a conversation) is carried as is.
	env := b.env("m-2", Inc{Key: "k-2", N: 1})
	env.CorrelationID = "checkout-77"
	b.publish(env)
	// A message without one (put on the transport directly): the saga's key.
	env = b.env("m-3", Inc{Key: "k-3", N: 1})
	env.CorrelationID = ""
	if err := b.mem.Publish(b.ctx, []transport.Envelope{env}); err != nil {
		t.Fatal(err)
	}
	b.settle()

	want := map[string]string{"k-1": "k-1", "k-2": "checkout-77", "k-3": "k-3"}
	sent := b.rec.sent(incrementedType)
	if len(sent) != len(want) {
		t.Fatalf("got %d Incremented messages, want %d", len(sent), len(want))
	}
	for _, e := range sent {
		key := e.Headers[transport.HeaderSagaKey]
		if e.CorrelationID != want[key] {
			t.Errorf("Incremented emitted by counter %s: correlation ID %q, want %q", key, e.CorrelationID, want[key])
		}
	}
	ts, err := b.mstore.ListTimers(b.ctx, &store.ListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != len(want) {
		t.Fatalf("got %d timers, want %d (one per counter)", len(ts), len(want))
	}
	for _, tm := range ts {
		if tm.Envelope.CorrelationID != tm.Key {
			t.Errorf("timer of counter %s: correlation ID %q, want the saga key", tm.Key, tm.Envelope.CorrelationID)
		}
	}
}

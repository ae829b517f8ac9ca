package idem_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// TestConsumersKeepKeyOrder: with several consumers on one stream, a
// saga's second message, received by another consumer while the first
// one's unit of work is still committing, waits for that commit instead
// of overtaking it. The envelopes carry no CorrelationID (built with the
// package's NewEnvelope), so only the engine knows their key. Without the
// order the Close loads no saga and is dead-lettered as saga_not_found.
func TestConsumersKeepKeyOrder(t *testing.T) {
	t.Parallel()
	closeReceived := make(chan struct{})
	var once sync.Once
	hooks := &hookStore{beforeCommit: func(c *store.Changes) error {
		if len(c.Inserts) == 0 {
			return nil
		}
		// The Inc that opens the saga commits only once another consumer
		// holds the Close.
		select {
		case <-closeReceived:
		case <-time.After(10 * time.Second):
			t.Error("the Close was not received while the Inc was committing")
		}
		return nil
	}}
	b := setup(t, &options{
		machine: newCounter(&counterOpts{notFoundDeadLetter: true}),
		hooks:   hooks,
		cfg:     idem.Config{BatchSize: 1, Consumers: 2, Lanes: 1},
		noStart: true,
	})
	b.rec.setAlter(func(d *transport.Delivery) {
		if d.Envelope.ID == "close" {
			once.Do(func() { close(closeReceived) })
		}
	})
	for _, m := range []struct {
		id  string
		msg any
	}{{"inc", Inc{Key: "k", N: 1}}, {"close", Close{Key: "k"}}} {
		env, err := idem.NewEnvelope(m.id, m.msg)
		if err != nil {
			t.Fatal(err)
		}
		if env.CorrelationID != "" {
			t.Fatalf("NewEnvelope set CorrelationID %q: the test needs envelopes without one", env.CorrelationID)
		}
		b.publish(env)
	}
	b.start()
	b.settle()
	b.stop()
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Errorf("dead letters %v, want none: the Close overtook the Inc", deadLetterReasons(dls))
	}
	if inst := b.instance("k"); inst == nil || inst.State != "Closed" {
		t.Errorf("instance %+v, want state Closed", inst)
	}
}

func deadLetterReasons(dls []store.DeadLetter) []string {
	out := make([]string, len(dls))
	for i, dl := range dls {
		out[i] = fmt.Sprintf("%s: %s", dl.Envelope.ID, dl.Reason)
	}
	return out
}

// TestLanesSharedByConsumers: Config.Lanes bounds the units of work open
// at once across every consumer (each holds a store connection), not per
// consumer: four consumers with two lanes never hold more than two. The
// first commit holds its unit of work open until a third one begins (a
// per-consumer limit lets the other consumers' units begin at once) or
// two seconds pass, which is the wait a correct engine pays once.
func TestLanesSharedByConsumers(t *testing.T) {
	t.Parallel()
	hooks := holdFirstCommitUntilOpen(3)
	b := setup(t, &options{
		hooks:   hooks,
		cfg:     idem.Config{BatchSize: 8, Consumers: 4, Lanes: 2},
		noStart: true,
	})
	const keys, perKey = 64, 4
	for i := range perKey {
		for k := range keys {
			b.send(fmt.Sprintf("inc-%d-%d", k, i), Inc{Key: fmt.Sprintf("k%d", k), N: 1})
		}
	}
	b.start()
	b.settle()
	b.stop()
	if got := hooks.maxOpen.Load(); got > 2 {
		t.Errorf("%d units of work open at once, want at most Lanes = 2", got)
	}
	for k := range keys {
		if c, _ := b.counter(fmt.Sprintf("k%d", k)); c.Total != perKey {
			t.Errorf("counter k%d: total %d, want %d", k, c.Total, perKey)
		}
	}
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Errorf("dead letters %v, want none", deadLetterReasons(dls))
	}
}

// TestPublishSetsCorrelationID: Engine.Publish gives an envelope without
// a CorrelationID the canonical key its saga correlates it to (NFD input,
// NFC key), so partitioned receive keeps its key's messages together; it
// leaves a given CorrelationID, a type no saga here consumes, and a body
// that does not decode alone.
func TestPublishSetsCorrelationID(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{noStart: true})
	b.rec.swallow = map[string]bool{}
	plain := func(id string, msg any) idem.Envelope {
		env, err := idem.NewEnvelope(id, msg)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	given := plain("given", Inc{Key: "k", N: 1})
	given.CorrelationID = "mine"
	broken := plain("broken", Inc{Key: "k", N: 1})
	broken.Body = []byte("{")
	b.publish(plain("nfd", Inc{Key: "Gru\u0308sse", N: 1}), given, plain("other", Incremented{Key: "k"}), broken)
	want := map[string]string{"nfd": "Grüsse", "given": "mine", "other": "", "broken": ""}
	got := map[string]string{}
	for _, typ := range []string{incType, incrementedType} {
		for _, env := range b.rec.sent(typ) {
			got[env.ID] = env.CorrelationID
		}
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: CorrelationID %q, want %q", id, got[id], w)
		}
	}
}

// TestStatsCountedBeforeAck: a message's outcome is in Stats before its
// delivery is acknowledged, so a caller that waits for the transport to
// settle reads final counts.
func TestStatsCountedBeforeAck(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{noStart: true, cfg: idem.Config{BatchSize: 1, Consumers: 1}})
	var mu sync.Mutex
	acked, short := 0, []string{}
	b.rec.onAck = func(ds []transport.Delivery) {
		mu.Lock()
		defer mu.Unlock()
		acked += len(ds)
		if s := b.engine().Stats(); int(s.Applied) < acked {
			short = append(short, fmt.Sprintf("%d acked, %d applied", acked, s.Applied))
		}
	}
	for i := range 5 {
		b.send(fmt.Sprintf("inc-%d", i), Inc{Key: fmt.Sprintf("k%d", i), N: 1})
	}
	b.start()
	b.settle()
	b.stop()
	mu.Lock()
	defer mu.Unlock()
	if acked != 5 || len(short) != 0 {
		t.Errorf("acked %d (want 5); acknowledged before counted: %v", acked, short)
	}
}

// TestSmallBatchesPutSeveralUnitsInFlight: with BatchSize 1 (latency
// first) one consumer still has several units of work open at once: it
// receives a message for each lane of its share, and each message commits
// in its own unit of work. The first commit holds until a second unit of
// work is open, which one message in flight at a time never gives.
func TestSmallBatchesPutSeveralUnitsInFlight(t *testing.T) {
	t.Parallel()
	hooks := holdFirstCommitUntilOpen(2)
	b := setup(t, &options{
		hooks:   hooks,
		cfg:     idem.Config{BatchSize: 1, Consumers: 1, Lanes: 4},
		noStart: true,
	})
	const keys, perKey = 16, 3
	for i := range perKey {
		for k := range keys {
			b.send(fmt.Sprintf("inc-%d-%d", k, i), Inc{Key: fmt.Sprintf("k%d", k), N: i + 1})
		}
	}
	b.start()
	b.settle()
	b.stop()
	if got := hooks.maxOpen.Load(); got < 2 || got > 4 {
		t.Errorf("%d units of work open at once, want 2 to Lanes = 4", got)
	}
	for k := range keys {
		c, _ := b.counter(fmt.Sprintf("k%d", k))
		if c.Total != 6 {
			t.Errorf("counter k%d: total %d, want 6", k, c.Total)
		}
	}
}

// holdFirstCommitUntilOpen returns a hookStore whose first commit waits
// (for at most two seconds) until n units of work are open at once, so
// that a test can see how many the engine keeps open together.
func holdFirstCommitUntilOpen(n int32) *hookStore {
	hooks := &hookStore{}
	var first sync.Once
	hooks.beforeCommit = func(*store.Changes) error {
		first.Do(func() {
			deadline := time.Now().Add(2 * time.Second)
			for hooks.open.Load() < n && time.Now().Before(deadline) {
				runtime.Gosched()
			}
		})
		return nil
	}
	return hooks
}

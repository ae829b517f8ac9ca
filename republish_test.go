package idem_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// dedupOptions runs a counter whose "k" increments fail with failure while
// broken is set, on a transport that drops a publish ID seen within an
// hour, as JetStream's duplicate window does with Nats-Msg-Id.
func dedupOptions(broken *atomic.Bool, failure func() error) *options {
	m, _ := failingCounter("k", func(int64) error {
		if broken.Load() {
			return failure()
		}
		return nil
	})
	return &options{machine: m, mem: memtransport.Config{DedupWindow: time.Hour}}
}

// checkApplied fails unless counter k applied exactly one increment of 1.
func checkApplied(t *testing.T, b *bundle, what string) {
	t.Helper()
	if c, _ := b.counter("k"); c.Total != 1 || c.Incs != 1 {
		t.Fatalf("%s: counter k %+v, want one increment applied", what, c)
	}
}

// A dead letter replayed within the transport's deduplication window
// reaches the engine and is applied once: the transport tells the replay
// from the first publish, which it would drop as a duplicate of the ID.
func TestReplayWithinTheDedupWindowIsApplied(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	b := setup(t, dedupOptions(&broken, func() error { return idem.Permanent(errors.New("handler bug")) }))
	b.send("inc-1", Inc{Key: "k", N: 1})
	b.settle()
	if dls := b.deadLetters(); len(dls) != 1 {
		t.Fatalf("got %d dead letters, want 1", len(dls))
	}
	broken.Store(false) // the fix is deployed
	if err := b.engine().ReplayDeadLetter(b.ctx, "inc-1"); err != nil {
		t.Fatal(err)
	}
	b.settle()
	eventuallyf(t, 30*time.Second, func() bool {
		dls := b.deadLetters()
		return len(dls) == 1 && dls[0].LastReplay().Outcome == store.ReplaySucceeded
	}, func() string {
		return "the replay was not settled as succeeded: the transport dropped it? " + transportStats(b)
	})
	checkApplied(t, b, "after the replay")
	if st := b.mem.Stats(); st.DuplicatesDropped != 0 {
		t.Errorf("the transport dropped %d publishes, want none", st.DuplicatesDropped)
	}
}

// A "retry now" (the admin's: the retry's envelope published again with
// transport.HeaderActor) of a message waiting out its backoff reaches the
// engine within the transport's deduplication window and is applied once;
// a second one is a duplicate for the inbox; a plain publish of the same
// envelope is still dropped by the transport.
func TestRetryNowWithinTheDedupWindowIsApplied(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	b := setup(t, dedupOptions(&broken, func() error { return idem.RetryAfter(time.Hour, errors.New("service down")) }))
	env := b.env("inc-1", Inc{Key: "k", N: 1})
	b.publish(env)
	rr := b.mstore
	eventually(t, func() bool { return len(allRetries(t, rr)) == 1 })
	broken.Store(false) // the service is back; the message waits an hour

	retryNow := func() {
		t.Helper()
		cp := allRetries(t, rr)[0].Envelope.Clone() // as admin's retry now does
		if cp.Headers == nil {
			cp.Headers = map[string]string{}
		}
		cp.Headers[transport.HeaderActor] = "api: alice"
		if err := b.engine().Publish(b.ctx, cp); err != nil {
			t.Fatal(err)
		}
	}
	retryNow()
	eventuallyf(t, 30*time.Second, func() bool { return b.stats().Applied == 1 }, func() string {
		return "the retry now was not applied: " + transportStats(b)
	})
	checkApplied(t, b, "after the retry now")

	b.publish(env) // an ordinary duplicate: the transport drops it
	if st := b.mem.Stats(); st.DuplicatesDropped != 1 {
		t.Errorf("after a plain publish again: the transport dropped %d publishes, want 1", st.DuplicatesDropped)
	}
	if err := b.engine().Publish(b.ctx, func() idem.Envelope {
		cp := env.Clone()
		cp.Headers = map[string]string{transport.HeaderActor: "api: bob"}
		return cp
	}()); err != nil {
		t.Fatal(err)
	}
	eventuallyf(t, 30*time.Second, func() bool { return b.stats().Duplicates == 1 }, func() string {
		return "a second retry now was not delivered and skipped as a duplicate: " + transportStats(b)
	})
	checkApplied(t, b, "after a second retry now")
}

func transportStats(b *bundle) string {
	st := b.mem.Stats()
	return fmt.Sprintf("transport published %d, dropped %d, delivered %d", st.Published, st.DuplicatesDropped, st.Delivered)
}

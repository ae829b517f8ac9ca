package memtransport_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// The window counts from the accepted publish, as JetStream's does: a copy
// within it is dropped (and does not extend it), one after it is
// delivered; a re-publish with a new mark is delivered within it.
func TestDedupWindowCountsFromTheAcceptedPublish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = time.Minute
		b := setup(t, &memtransport.Config{DedupWindow: window})
		env := envs(1, func(int) string { return "k" })[0]
		b.publish(t, env)
		b.ack(t, b.receive(t, 10)...)

		time.Sleep(window - time.Second) // the bubble's clock: no real wait
		b.publish(t, env)
		b.expectNothing(t, time.Millisecond)
		cp := env.Clone()
		cp.Headers = map[string]string{transport.HeaderRepublish: "replay 1"}
		b.publish(t, cp)
		if ds := b.receive(t, 10); len(ds) != 1 || ds[0].Envelope.Headers[transport.HeaderRepublish] != "replay 1" {
			t.Fatalf("within the window: got %v, want the re-published copy alone", ids(ds))
		} else {
			b.ack(t, ds...)
		}

		time.Sleep(time.Second) // the first publish is now a window old
		b.publish(t, env)
		if ds := b.receive(t, 10); len(ds) != 1 || ds[0].Envelope.ID != env.ID {
			t.Fatalf("after the window: got %v, want %s again", ids(ds), env.ID)
		} else {
			b.ack(t, ds...)
		}
		if st := b.tr.Stats(); st.Published != 3 || st.DuplicatesDropped != 1 {
			t.Errorf("Stats: Published %d, DuplicatesDropped %d; want 3 and 1", st.Published, st.DuplicatesDropped)
		}
	})
}

func TestNegativeDedupWindowPanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("New with DedupWindow -1s did not panic")
		}
	}()
	memtransport.New(&memtransport.Config{DedupWindow: -time.Second})
}

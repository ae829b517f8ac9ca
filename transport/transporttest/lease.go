package transporttest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
)

// extendLease checks transport.LeaseExtender, on a transport that
// implements it: a delivery whose lease is extended every third of
// LeaseDuration is not handed out again for three leases, and its Ack
// then settles it; with Features.Fencing, an extension of a delivery
// handed out again since is refused with ErrLeaseLost and leaves the
// newer delivery alone.
func (s *suite) extendLease(t *testing.T) {
	tr := s.setup(t)
	ext, ok := tr.(transport.LeaseExtender)
	if !ok {
		t.Skipf("transport (%T) does not implement transport.LeaseExtender", tr)
	}
	if got := ext.LeaseDuration(); got <= 0 || got > 2*s.f.Lease {
		t.Fatalf("LeaseDuration() = %v, want about Features.Lease (%v)", got, s.f.Lease)
	}
	publish(t, tr, envelopes("extend", 1)...)
	d1 := receiveOne(t, tr, promptWait)
	stop := make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		tick := time.NewTicker(ext.LeaseDuration() / 3)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				failed <- nil
				return
			case <-tick.C:
				if err := ext.ExtendLeases(t.Context(), []transport.Delivery{d1}); err != nil {
					failed <- err
					return
				}
			}
		}
	}()
	expectNothing(t, tr, 3*ext.LeaseDuration())
	close(stop)
	if err := <-failed; err != nil {
		t.Fatalf("ExtendLeases(%s) while its lease was alive: %v", describe(d1), err)
	}
	if !s.f.Fencing {
		ack(t, tr, d1)
		return
	}
	d2 := receiveOne(t, tr, promptWait+s.f.redeliveryWait()) // extensions stopped: d1's lease runs out
	if d2.Envelope.ID != d1.Envelope.ID || d2.Attempt != 2 {
		t.Fatalf("got %s, want attempt 2 of %s", describe(d2), describe(d1))
	}
	if err := ext.ExtendLeases(t.Context(), []transport.Delivery{d1}); !errors.Is(err, transport.ErrLeaseLost) {
		t.Errorf("ExtendLeases of %s after its redelivery: got %v, want ErrLeaseLost", describe(d1), err)
	}
	if err := ext.ExtendLeases(t.Context(), []transport.Delivery{d2}); err != nil {
		t.Errorf("ExtendLeases of the newer delivery %s: %v", describe(d2), err)
	}
	ack(t, tr, d2)
	expectNothing(t, tr, s.f.quietWait())
}

// extendAfterNack checks that a Nack settles a delivery for
// transport.LeaseExtender as an Ack does: an extension of the nacked
// delivery is ignored (no error) and does not replace the Nack's delay,
// so the message is not handed out again before the delay has passed.
func (s *suite) extendAfterNack(t *testing.T) {
	tr := s.setup(t)
	ext, ok := tr.(transport.LeaseExtender)
	if !ok {
		t.Skipf("transport (%T) does not implement transport.LeaseExtender", tr)
	}
	if !s.f.NativeDelay {
		t.Skip("transport does not honour Nack delays: Features.NativeDelay is false")
	}
	nackWithDelay(t, tr, "extend-nack", 3*s.f.Lease, s.f.redeliveryWait(), " and an extension: the extension replaced the delay", func(d transport.Delivery) {
		if err := ext.ExtendLeases(t.Context(), []transport.Delivery{d}); err != nil {
			t.Errorf("ExtendLeases of %s after its Nack: %v, want nil (a nacked delivery is settled)", describe(d), err)
		}
	})
	expectNothing(t, tr, s.f.quietWait())
}

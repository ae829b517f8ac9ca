package memstore

import (
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// replacesRetry reports whether r replaces the stored retry old (see
// store.RetryRecorder): more or as many attempts, or a failure not before
// the operator's last retry now.
func replacesRetry(old, r *store.Retry) bool {
	return r.Attempts >= old.Attempts || (!old.RetryNowAt.IsZero() && !r.LastFailedAt.Before(old.RetryNowAt))
}

// keepRetry keeps in c, which replaces old, what old has and c does not:
// the first failure's time, the greater attempts, the envelope and the
// retry now.
func keepRetry(c, old *store.Retry) {
	c.FirstFailedAt = old.FirstFailedAt
	c.Attempts = max(c.Attempts, old.Attempts)
	if c.Envelope == nil {
		c.Envelope = cloneEnvelope(old.Envelope)
	}
	if c.RetryNowAt.IsZero() {
		c.RetryNowAt = old.RetryNowAt
	}
}

func cloneEnvelope(e *transport.Envelope) *transport.Envelope {
	if e == nil {
		return nil
	}
	c := e.Clone()
	return &c
}

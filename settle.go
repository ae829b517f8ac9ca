package idem

import (
	"context"
	"time"

	"github.com/idemhq/idem/transport"
)

// settler settles a unit of work that landed: it publishes the emitted
// messages and marks them sent, acknowledges the deliveries, returns the
// ones to retry, and writes the sagas' log lines. It is the last part a
// batch meets.
type settler struct{ *base }

// settle runs after a successful commit: publish the outbox, acknowledge,
// return failed deliveries, and count. Publishing before acknowledging
// means a consumer never sees its queue empty while the consequences of a
// message are still in this process.
func (s *settler) settle(ctx context.Context, res *laneResult) {
	if len(res.outbox) > 0 {
		if err := s.tr.Publish(ctx, res.outbox); err != nil {
			s.log.WarnContext(ctx, "publish after commit failed; the outbox relay will send", "messages", len(res.outbox), "error", err)
		} else {
			s.markSent(ctx, res.outbox)
		}
	}
	if len(res.acks) > 0 {
		s.caps.leases.release(res.acks...)
		if err := s.tr.Ack(ctx, res.acks); err != nil {
			// Committed already: a redelivery is recognised by the inbox.
			s.log.WarnContext(ctx, "ack after commit failed; duplicates will be skipped", "deliveries", len(res.acks), "error", err)
		}
	}
	for _, n := range res.nacks {
		s.nack(ctx, n.d, n.delay)
	}
	for _, l := range res.logs {
		args := append([]any{logSagaType, l.it.typ, logSagaKey, l.it.key, logMessageID, l.it.msgID}, l.rec.Args...)
		s.log.Log(ctx, l.rec.Level, l.rec.Msg, args...)
	}
}

// nack returns d to the transport, to be delivered again after delay.
func (s *settler) nack(ctx context.Context, d transport.Delivery, delay time.Duration) {
	s.obs.retried(1)
	s.caps.leases.release(d)
	if err := s.tr.Nack(ctx, d, delay); err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "nack failed; the lease will expire", logMessageID, d.Envelope.ID, "error", err)
	}
}

// markSent marks published outbox messages sent; the relay sends the
// ones it could not mark again, under the same IDs.
func (s *settler) markSent(ctx context.Context, envs []Envelope) {
	ids := make([]string, len(envs))
	for i := range envs {
		ids[i] = envs[i].ID
	}
	if err := s.store.MarkSent(ctx, ids, s.cfg.Clock()); err != nil {
		s.log.WarnContext(ctx, "mark outbox sent failed; the relay will send again with the same IDs", "messages", len(ids), "error", err)
	}
}

package rabbitmq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemhq/idem/transport"
)

// Headers the transport sets on AMQP messages besides the envelope.
const (
	// hdrAttempts counts the deliveries of a message before it was
	// re-published to a delay queue (its x-delivery-count restarts there).
	hdrAttempts = "idem-attempts"
	// hdrNotBefore is the Unix time in milliseconds before which a delayed
	// message must not be handed out.
	hdrNotBefore = "idem-not-before"
	// hdrBatch ties a returned (unroutable) message to its publish batch.
	hdrBatch = "idem-batch"
	// contentType marks a body that is a JSON-encoded transport.Envelope.
	contentType = "application/vnd.idem.envelope+json"
)

// errSessionLost reports a publish that failed because the connection or
// channel closed under it; it is retried on the next session.
var errSessionLost = errors.New("rabbitmq: connection lost while publishing")

// outgoing is one message to publish.
type outgoing struct {
	exchange, key string
	id            string
	msg           amqp.Publishing
}

// delayBuckets are the delay queues' TTLs. A Nack delay is rounded up to a
// bucket, and a delay beyond the last one goes round it again.
var delayBuckets = []time.Duration{
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 30 * time.Minute,
	time.Hour,
}

func bucket(d time.Duration) time.Duration {
	for _, b := range delayBuckets {
		if b >= d {
			return b
		}
	}
	return delayBuckets[len(delayBuckets)-1]
}

// message encodes an envelope: the body is the JSON-encoded envelope, and
// the AMQP properties repeat its id, type and correlation id for operators
// and tools.
func (t *Transport) message(env *transport.Envelope, headers amqp.Table) (amqp.Publishing, uint32, error) {
	body, err := json.Marshal(env)
	if err != nil {
		return amqp.Publishing{}, 0, fmt.Errorf("rabbitmq: encoding envelope %s: %w", env.ID, err)
	}
	return amqp.Publishing{
		Headers:       headers,
		ContentType:   contentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     env.ID,
		CorrelationId: env.CorrelationID,
		Type:          env.Type,
		Timestamp:     env.SentAt,
		Body:          body,
	}, transport.PartitionHash(transport.PartitionKey(env)), nil
}

// DefaultMaxMessageSize is the default Config.MaxMessageSize: RabbitMQ 4's
// default max_message_size.
const DefaultMaxMessageSize = 16 << 20

// EnvelopeReserve is the part of Config.MaxMessageSize that
// MaxMessageBytes keeps for an envelope's fields besides its Body (ID,
// type, keys, headers, sent-at, as JSON). Metadata of up to about 60 KiB
// of plain text fits beside a Body of MaxMessageBytes.
const EnvelopeReserve = 64 << 10

// MaxMessageBytes returns the largest Envelope.Body, in bytes, that
// Publish accepts (transport.SizeLimiter): the AMQP body is the envelope as
// JSON, with Body in base64 (4 bytes for every 3), so it is
// (Config.MaxMessageSize - EnvelopeReserve) × 3/4. Publish refuses every
// envelope with a longer Body, and one whose metadata is so large that its
// encoding exceeds Config.MaxMessageSize; both errors wrap
// transport.ErrTooLarge. Set the engine's Config.MaxBodyBytes to at most
// this (the engine lowers it itself).
func (t *Transport) MaxMessageBytes() int {
	return (t.cfg.MaxMessageSize - EnvelopeReserve) / 4 * 3
}

// partKey is the routing key of a partition queue.
func (t *Transport) partKey(hash uint32) string {
	return "p" + strconv.Itoa(int(hash%uint32(t.cfg.Partitions)))
}

// Publish sends msgs to their partition queues with publisher confirms and
// the mandatory flag: it returns nil once the broker has confirmed every
// message (for quorum queues, once a majority of replicas wrote it), and
// an error if any was nacked or could not be routed. A connection lost
// meanwhile is waited out (until ctx ends) and the whole batch is sent
// again with the same ids. Before sending anything it refuses msgs if one
// of them is too large (see MaxMessageBytes), with an error wrapping
// transport.ErrTooLarge.
func (t *Transport) Publish(ctx context.Context, msgs []transport.Envelope) error {
	out := make([]outgoing, len(msgs))
	for i := range msgs {
		env := &msgs[i]
		if env.ID == "" || env.Type == "" {
			return fmt.Errorf("rabbitmq: publish: envelope %d has no ID or Type", i)
		}
		if len(env.Body) > t.MaxMessageBytes() {
			return fmt.Errorf("rabbitmq: message %s: body of %d bytes exceeds the %d bytes this transport carries (Config.MaxMessageSize %d, the broker's max_message_size, as base64 JSON less %d for the other fields): raise max_message_size on the broker and Config.MaxMessageSize, or set the engine's Config.MaxBodyBytes to at most %d: %w",
				env.ID, len(env.Body), t.MaxMessageBytes(), t.cfg.MaxMessageSize, EnvelopeReserve, t.MaxMessageBytes(), transport.ErrTooLarge)
		}
		msg, h, err := t.message(env, nil)
		if err != nil {
			return err
		}
		if len(msg.Body) > t.cfg.MaxMessageSize {
			return fmt.Errorf("rabbitmq: message %s: encoded as %d bytes, over Config.MaxMessageSize %d (the broker's max_message_size): its ID, type, keys and headers take more than the %d bytes EnvelopeReserve keeps for them: shorten them or raise max_message_size: %w",
				env.ID, len(msg.Body), t.cfg.MaxMessageSize, EnvelopeReserve, transport.ErrTooLarge)
		}
		out[i] = outgoing{exchange: t.exchange(), key: t.partKey(h), id: env.ID, msg: msg}
	}
	if len(out) == 0 {
		if t.isClosed() {
			return transport.ErrClosed
		}
		return nil
	}
	for {
		s, err := t.current(ctx)
		if err != nil {
			return err
		}
		err = t.publish(ctx, s, out)
		if !errors.Is(err, errSessionLost) {
			return err
		}
		t.log.Debug("rabbitmq publish interrupted by a lost connection; publishing again", "messages", len(out))
	}
}

// publish sends out on s and waits for the confirms and returns.
func (t *Transport) publish(ctx context.Context, s *session, out []outgoing) error {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	batch := int64(t.pubs.Add(1))
	for _, o := range out {
		if o.exchange == t.delayExchange() {
			ms := bucketOf(o.key)
			if !s.delays[ms] {
				if err := t.declareDelay(s.pub, ms); err != nil {
					s.kill() // the channel is closed by the failed declare
					return err
				}
				s.delays[ms] = true
			}
		}
	}
	lost := func(err error) error {
		if s.pub.IsClosed() || errors.Is(err, amqp.ErrClosed) {
			s.kill()
			return fmt.Errorf("%w: %w", errSessionLost, err)
		}
		return err
	}
	dcs := make([]*amqp.DeferredConfirmation, len(out))
	for i := range out {
		msg := out[i].msg
		msg.Headers = withArgs(msg.Headers, hdrBatch, batch)
		dc, err := s.pub.PublishWithDeferredConfirmWithContext(ctx, out[i].exchange, out[i].key, true, false, msg)
		if err != nil {
			return lost(fmt.Errorf("rabbitmq: publishing %s: %w", out[i].id, err))
		}
		dcs[i] = dc
	}
	returned := map[string]string{}
	record := func(r amqp.Return) {
		if b, ok := r.Headers[hdrBatch].(int64); ok && b == batch {
			returned[r.MessageId] = fmt.Sprintf("%d %s", r.ReplyCode, r.ReplyText)
		}
	}
	returns := s.returns
	var nacked []string
	for i, dc := range dcs {
	wait:
		for {
			select {
			case <-dc.Done():
				break wait
			case r, ok := <-returns:
				if !ok {
					returns = nil
					continue
				}
				record(r)
			case <-ctx.Done():
				return fmt.Errorf("rabbitmq: waiting for the broker to confirm %d messages: %w", len(out), ctx.Err())
			}
		}
		if !dc.Acked() {
			if s.pub.IsClosed() || s.isDead() {
				s.kill()
				return errSessionLost
			}
			nacked = append(nacked, out[i].id)
		}
	}
	// A basic.return precedes the confirm of its message, so every return
	// of this batch has been queued by now.
	for drained := false; !drained && returns != nil; {
		select {
		case r := <-returns:
			record(r)
		default:
			drained = true
		}
	}
	var errs []error
	if len(nacked) > 0 {
		errs = append(errs, fmt.Errorf("rabbitmq: the broker refused (nacked) %d messages, first %s: the queue may be unavailable (no quorum) or rejecting publishes; publish them again", len(nacked), nacked[0]))
	}
	for id, why := range returned {
		errs = append(errs, fmt.Errorf("rabbitmq: message %s could not be routed (%s): its partition queue is missing; restart a replica to declare the queues", id, why))
	}
	return errors.Join(errs...)
}

// bucketOf extracts the milliseconds from a delay routing key d<ms>.p<i>.
func bucketOf(key string) int64 {
	end := 1
	for end < len(key) && key[end] != '.' {
		end++
	}
	ms, _ := strconv.ParseInt(key[1:end], 10, 64)
	return ms
}

// delayed returns the message to publish to a delay queue for env: it
// comes back to its partition queue no sooner than notBefore.
func (t *Transport) delayed(env *transport.Envelope, attempts int, notBefore time.Time) (outgoing, error) {
	wait := time.Until(notBefore)
	ms := bucket(wait).Milliseconds()
	msg, h, err := t.message(env, amqp.Table{hdrAttempts: int64(attempts), hdrNotBefore: notBefore.UnixMilli()})
	if err != nil {
		return outgoing{}, err
	}
	return outgoing{
		exchange: t.delayExchange(),
		key:      "d" + strconv.FormatInt(ms, 10) + "." + t.partKey(h),
		id:       env.ID,
		msg:      msg,
	}, nil
}

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

// forward moves the deliveries of one partition queue's channel into the
// transport's buffer until the channel closes.
func (t *Transport) forward(s *session, part int, ch *amqp.Channel, dl <-chan amqp.Delivery) {
	defer t.wg.Done()
	for d := range dl {
		env, attempt, notBefore, err := decode(&d)
		if err != nil {
			// Not an Idem envelope: the dead-letter queue keeps it for
			// an operator; retrying cannot help.
			t.log.Error("rabbitmq: dead-lettering an undecodable message", "queue", t.queue(part), "message_id", d.MessageId, "error", err)
			_ = d.Reject(false)
			continue
		}
		if time.Now().Before(notBefore) {
			// Back from a delay queue early (a delay longer than the
			// largest bucket, or clock skew between replicas): wait again.
			if err := t.redelay(s, &env, attempt-1, notBefore); err != nil {
				t.log.Warn("rabbitmq: re-delaying a message failed; requeueing it", "message_id", env.ID, "error", err)
				_ = d.Nack(false, true)
				continue
			}
			_ = d.Ack(false)
			continue
		}
		t.push(s, part, &inbound{
			d: transport.Delivery{
				Envelope: env,
				Attempt:  attempt,
				Token:    strconv.FormatUint(s.gen, 10) + "." + strconv.Itoa(part) + "." + strconv.FormatUint(d.DeliveryTag, 10),
			},
			hash: transport.PartitionHash(transport.PartitionKey(&env)),
			sess: s,
			ch:   ch,
			tag:  d.DeliveryTag,
		})
	}
}

func (t *Transport) redelay(s *session, env *transport.Envelope, attempts int, notBefore time.Time) error {
	o, err := t.delayed(env, attempts, notBefore)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return t.publish(ctx, s, []outgoing{o})
}

// decode reads an envelope and its attempt count from a delivery.
func decode(d *amqp.Delivery) (env transport.Envelope, attempt int, notBefore time.Time, err error) {
	if err := json.Unmarshal(d.Body, &env); err != nil {
		return env, 0, notBefore, fmt.Errorf("body is not a JSON Idem envelope (content type %q): %w", d.ContentType, err)
	}
	if env.ID == "" || env.Type == "" {
		return env, 0, notBefore, fmt.Errorf("envelope without id or type (content type %q)", d.ContentType)
	}
	// Quorum queues count earlier deliveries of this copy in
	// x-delivery-count; idem-attempts counts those before the copy was
	// re-published through a delay queue.
	attempt = 1 + intHeader(d.Headers["x-delivery-count"]) + intHeader(d.Headers[hdrAttempts])
	if ms := intHeader(d.Headers[hdrNotBefore]); ms > 0 {
		notBefore = time.UnixMilli(int64(ms))
	}
	return env, attempt, notBefore, nil
}

func intHeader(v any) int {
	switch n := v.(type) {
	case int64:
		return int(n)
	case int32:
		return int(n)
	case int16:
		return int(n)
	case int8:
		return int(n)
	case int:
		return n
	case uint8:
		return int(n)
	case uint16:
		return int(n)
	case uint32:
		return int(n)
	case uint64:
		return int(n)
	}
	return 0
}

// push buffers a delivery of session s, unless s died meanwhile (then the
// broker has requeued it).
func (t *Transport) push(s *session, part int, in *inbound) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || s.isDead() {
		return
	}
	t.parts[part] = append(t.parts[part], in)
	close(t.arrived)
	t.arrived = make(chan struct{})
}

// Receive hands out up to max deliveries from any partition queue this
// process is the active consumer of.
func (t *Transport) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	return t.receive(ctx, max, 0, 1)
}

// ReceivePartition is Receive restricted to the messages whose canonical
// CorrelationID (or ID without one) hashes to part modulo parts, with
// pgstore's hash (PostgreSQL's hashtext).
func (t *Transport) ReceivePartition(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	if parts < 1 || part < 0 || part >= parts {
		return nil, fmt.Errorf("rabbitmq: ReceivePartition(part %d, parts %d): want 0 <= part < parts", part, parts)
	}
	return t.receive(ctx, max, part, parts)
}

func (t *Transport) receive(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	if max < 1 {
		max = 1
	}
	t.mu.Lock()
	if !t.consuming {
		// run starts the consumers, on this session and the next ones.
		t.consuming = true
		close(t.startConsuming)
	}
	t.mu.Unlock()
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, transport.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			t.mu.Unlock()
			return nil, err
		}
		out := t.take(max, part, parts)
		arrived := t.arrived
		t.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		select {
		case <-arrived:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.done:
			return nil, transport.ErrClosed
		}
	}
}

// take moves up to max buffered deliveries of the partition into pending;
// t.mu is held.
func (t *Transport) take(max, part, parts int) []transport.Delivery {
	var out []transport.Delivery
	now := time.Now()
	n := len(t.parts)
	start := t.rr
	t.rr = (t.rr + 1) % n
	for i := 0; i < n && len(out) < max; i++ {
		q := (start + i) % n
		buf := t.parts[q]
		kept := buf[:0]
		for _, in := range buf {
			if len(out) < max && (parts < 2 || int(in.hash%uint32(parts)) == part) {
				in.out = now
				t.pending[in.d.Token] = in
				out = append(out, in.d)
				continue
			}
			kept = append(kept, in)
		}
		clear(buf[len(kept):])
		t.parts[q] = kept
	}
	return out
}

// claim takes a handed-out delivery out of pending for settling. It
// returns nil and no error for a delivery already settled.
func (t *Transport) claim(token string) (*inbound, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, transport.ErrClosed
	}
	in, ok := t.pending[token]
	if !ok {
		if _, lost := t.lost[token]; lost {
			return nil, fmt.Errorf("rabbitmq: delivery %s: %w (the lease expired or the connection closed, and the broker requeued the message)", token, transport.ErrLeaseLost)
		}
		return nil, nil
	}
	delete(t.pending, token)
	if in.sess.isDead() {
		t.lost[token] = time.Now()
		return nil, fmt.Errorf("rabbitmq: delivery %s: %w (its connection closed and the broker requeued the message)", token, transport.ErrLeaseLost)
	}
	return in, nil
}

// settleFailed reports a basic.ack or basic.nack that could not be sent:
// the channel is closed, so the broker requeues the message.
func (t *Transport) settleFailed(in *inbound, err error) error {
	in.sess.kill()
	t.mu.Lock()
	t.lost[in.d.Token] = time.Now()
	t.mu.Unlock()
	return fmt.Errorf("rabbitmq: settling delivery %s: %w (its channel closed: %w)", in.d.Token, transport.ErrLeaseLost, err)
}

// Ack acknowledges deliveries (basic.ack). A delivery whose lease expired
// or whose connection closed returns an error wrapping
// transport.ErrLeaseLost: the broker has requeued it. An AMQP ack has no
// reply, so a connection lost right after Ack may still redeliver the
// message; the engine's inbox absorbs that.
func (t *Transport) Ack(_ context.Context, ds []transport.Delivery) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	var errs []error
	for _, d := range ds {
		in, err := t.claim(d.Token)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if in == nil {
			continue
		}
		if err := in.ch.Ack(in.tag, false); err != nil {
			errs = append(errs, t.settleFailed(in, err))
		}
	}
	return errors.Join(errs...)
}

// Nack returns a delivery to the broker. Without a delay it is requeued at
// once (basic.nack with requeue). With one, a copy is published to the
// delay queue of the smallest bucket not shorter than delay, confirmed,
// and the delivery acknowledged; the copy comes back to its partition
// queue when the bucket's TTL dead-letters it, and is held again if it
// arrives before delay has passed.
func (t *Transport) Nack(ctx context.Context, d transport.Delivery, delay time.Duration) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	in, err := t.claim(d.Token)
	if err != nil || in == nil {
		return err
	}
	if delay <= 0 {
		if err := in.ch.Nack(in.tag, false, true); err != nil {
			return t.settleFailed(in, err)
		}
		return nil
	}
	o, err := t.delayed(&in.d.Envelope, in.d.Attempt, time.Now().Add(delay))
	if err == nil {
		err = t.publish(ctx, in.sess, []outgoing{o})
	}
	if err != nil {
		if nerr := in.ch.Nack(in.tag, false, true); nerr != nil {
			return t.settleFailed(in, nerr)
		}
		return fmt.Errorf("rabbitmq: nack of %s with delay %v: the delay queue did not take it, so it was requeued without delay: %w", in.d.Envelope.ID, delay, err)
	}
	// If this ack is lost the original comes back too: a duplicate, which
	// the engine's inbox recognises by its id.
	if err := in.ch.Ack(in.tag, false); err != nil {
		return t.settleFailed(in, err)
	}
	return nil
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// reap requeues deliveries held past the lease (fencing their late
// settlement) and forgets old fenced tokens.
func (t *Transport) reap() {
	defer t.wg.Done()
	every := min(max(t.cfg.Lease/8, 10*time.Millisecond), time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	keep := max(10*t.cfg.Lease, 10*time.Minute)
	for {
		select {
		case <-t.done:
			return
		case <-tick.C:
		}
		now := time.Now()
		var expired []*inbound
		t.mu.Lock()
		for tok, in := range t.pending {
			if now.Sub(in.out) >= t.cfg.Lease {
				delete(t.pending, tok)
				t.lost[tok] = now
				expired = append(expired, in)
			}
		}
		for tok, at := range t.lost {
			if now.Sub(at) > keep {
				delete(t.lost, tok)
			}
		}
		t.mu.Unlock()
		for _, in := range expired {
			t.log.Warn("rabbitmq: delivery held past its lease; requeueing it", "message_id", in.d.Envelope.ID, "lease", t.cfg.Lease)
			if err := in.ch.Nack(in.tag, false, true); err != nil {
				in.sess.kill() // closing the channel requeues it as well
			}
		}
	}
}

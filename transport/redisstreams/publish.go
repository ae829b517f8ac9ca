package redisstreams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/transport"
)

// entry is one envelope as XADD adds it to its partition's stream.
type entry struct {
	stream string
	id     string
	values []any
}

// Publish adds every envelope to the stream of its partition (XADD, in one
// pipeline) with the fields id (the envelope ID), meta (the rest of the
// envelope but the body, as JSON) and body (the body's bytes as they are).
// It returns once the server has answered every XADD, which on a server
// with appendfsync always means written and fsynced. Envelopes without an
// ID or Type are refused, and one whose Body exceeds MaxMessageBytes with
// an error wrapping transport.ErrTooLarge, before anything of the batch is
// sent. While the server cannot be reached Publish waits for it (until ctx
// ends) and adds again what it had not confirmed, with the same IDs.
// Redis has no deduplication window: an envelope published twice is
// delivered twice, and the engine's inbox skips the copy.
func (t *Transport) Publish(ctx context.Context, msgs []transport.Envelope) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	out := make([]entry, 0, len(msgs))
	for i := range msgs {
		env := &msgs[i]
		if env.ID == "" || env.Type == "" {
			return fmt.Errorf("redisstreams: publish: envelope %d has no ID or Type", i)
		}
		if len(env.Body) > t.maxBytes {
			return fmt.Errorf("redisstreams: publish %s: body of %d bytes exceeds the limit of %d (Config.MaxMessageBytes, within the server's proto-max-bulk-len): %w",
				env.ID, len(env.Body), t.maxBytes, transport.ErrTooLarge)
		}
		m, err := json.Marshal(meta{ID: env.ID, Type: env.Type, CorrelationID: env.CorrelationID, CausationID: env.CausationID,
			IdempotencyKey: env.IdempotencyKey, Headers: env.Headers, SentAt: env.SentAt})
		if err != nil {
			return fmt.Errorf("redisstreams: publish: encoding envelope %s: %w", env.ID, err)
		}
		p, _ := t.partitionOf(env.CorrelationID, env.ID)
		// The body is copied: what was published belongs to the
		// transport, whatever the caller does with its slice afterwards.
		out = append(out, entry{stream: t.streams[p], id: env.ID, values: []any{"id", env.ID, "meta", string(m), "body", string(env.Body)}})
	}
	return t.do(ctx, "publish", 0, func(ctx context.Context) error {
		if len(out) == 0 {
			return nil
		}
		cmds, _ := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, e := range out {
				p.XAdd(ctx, &redis.XAddArgs{Stream: e.stream, Values: e.values})
			}
			return nil
		})
		// Keep what failed for the next try; what succeeded is stored.
		var errs []error
		failed := out[:0]
		for i, c := range cmds {
			if err := c.Err(); err != nil {
				failed = append(failed, out[i])
				errs = append(errs, fmt.Errorf("XADD %s to %s: %w", out[i].id, out[i].stream, err))
			}
		}
		out = failed
		return errors.Join(errs...)
	})
}

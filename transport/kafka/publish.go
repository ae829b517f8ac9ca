package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemhq/idem/transport"
)

// headerMeta is the record header that carries the envelope but its body,
// as JSON; the record's value is the body, its key the partition key.
const headerMeta = "idem-meta"

// meta is the envelope without its body.
type meta struct {
	ID             string            `json:"id"`
	Type           string            `json:"type"`
	CorrelationID  string            `json:"correlation_id,omitempty"`
	CausationID    string            `json:"causation_id,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	SentAt         time.Time         `json:"sent_at"`
}

// Publish produces every envelope to its partition of the topic,
// PartitionOf(PartitionKey(env), Config.Partitions) (the rule every Idem
// transport follows, so that one saga key always lands in one partition
// and keeps its order there), with the partition key as the record's key,
// the body as its value and the rest of the envelope in the idem-meta
// header. It returns once every in-sync replica has the records
// (acks=all). The producer is idempotent: a record retried after a lost
// answer is written once. Kafka has no deduplication window by message
// ID: an envelope published twice is delivered twice, and the engine's
// inbox skips the copy. Envelopes without an ID or Type are refused, and
// one whose Body exceeds MaxMessageBytes with an error wrapping
// transport.ErrTooLarge, before anything of the batch is produced.
func (t *Transport) Publish(ctx context.Context, msgs []transport.Envelope) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	recs := make([]*kgo.Record, 0, len(msgs))
	for i := range msgs {
		r, err := t.record(i, &msgs[i])
		if err != nil {
			return err
		}
		recs = append(recs, r)
	}
	if len(recs) == 0 {
		return nil
	}
	if err := t.producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		if t.isClosed() && errors.Is(err, kgo.ErrClientClosed) {
			return transport.ErrClosed
		}
		if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) {
			return fmt.Errorf("kafka: publish to %s: the broker refused a record as too large (lower Config.MaxMessageBytes under the topic's max.message.bytes less 64 KiB): %w: %w", t.cfg.Topic, transport.ErrTooLarge, err)
		}
		return fmt.Errorf("kafka: publish %d records to %s: %w", len(recs), t.cfg.Topic, err)
	}
	return nil
}

// record encodes envelope i of a Publish.
func (t *Transport) record(i int, env *transport.Envelope) (*kgo.Record, error) {
	if env.ID == "" || env.Type == "" {
		return nil, fmt.Errorf("kafka: publish: envelope %d has no ID or Type", i)
	}
	if len(env.Body) > t.cfg.MaxMessageBytes {
		return nil, fmt.Errorf("kafka: publish %s: body of %d bytes exceeds the limit of %d (Config.MaxMessageBytes): %w",
			env.ID, len(env.Body), t.cfg.MaxMessageBytes, transport.ErrTooLarge)
	}
	m, err := json.Marshal(meta{ID: env.ID, Type: env.Type, CorrelationID: env.CorrelationID, CausationID: env.CausationID,
		IdempotencyKey: env.IdempotencyKey, Headers: env.Headers, SentAt: env.SentAt})
	if err != nil {
		return nil, fmt.Errorf("kafka: publish: encoding envelope %s: %w", env.ID, err)
	}
	key := transport.PartitionKey(env)
	if len(m)+len(key) > metaRoom-1024 {
		return nil, fmt.Errorf("kafka: publish %s: the envelope's metadata (ID, keys, headers) takes %d bytes, over the %d the transport leaves beside the body: %w",
			env.ID, len(m)+len(key), metaRoom-1024, transport.ErrTooLarge)
	}
	// The body is copied: what was published belongs to the transport.
	return &kgo.Record{
		Topic:     t.cfg.Topic,
		Partition: int32(transport.PartitionOf(key, t.cfg.Partitions)),
		Key:       []byte(key),
		Value:     append([]byte(nil), env.Body...),
		Headers:   []kgo.RecordHeader{{Key: headerMeta, Value: m}},
	}, nil
}

// decode reads an envelope from a record this package produced. A record
// without a decodable idem-meta header (another producer's) is handed out
// with the ID "kafka:<topic>/<partition>/<offset>", no type and, for a
// body, a JSON object of its key, value and headers, so that the engine
// dead-letters it with a reason and acknowledges it: it is never skipped,
// and never retried for ever.
func (t *Transport) decode(r *kgo.Record) transport.Envelope {
	env, err := decodeMeta(r)
	if err == nil {
		return env
	}
	id := fmt.Sprintf("kafka:%s/%d/%d", r.Topic, r.Partition, r.Offset)
	hs := map[string]string{}
	for _, h := range r.Headers {
		hs[h.Key] = string(h.Value)
	}
	body, _ := json.Marshal(map[string]any{"key": string(r.Key), "value": string(r.Value), "headers": hs})
	t.log.Warn("kafka: a record is not an Idem envelope; handing it out without a type, for the engine to dead-letter",
		"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "message_id", id, "error", err)
	return transport.Envelope{ID: id, Body: body}
}

func decodeMeta(r *kgo.Record) (transport.Envelope, error) {
	var raw []byte
	found := false
	for _, h := range r.Headers {
		if h.Key == headerMeta {
			raw, found = h.Value, true
		}
	}
	if !found {
		return transport.Envelope{}, errors.New("no idem-meta header")
	}
	var m meta
	if err := json.Unmarshal(raw, &m); err != nil {
		return transport.Envelope{}, fmt.Errorf("idem-meta header is not JSON envelope metadata: %w", err)
	}
	if m.ID == "" || m.Type == "" {
		return transport.Envelope{}, errors.New("idem-meta header has no id or type")
	}
	var body []byte
	if len(r.Value) > 0 {
		body = r.Value
	}
	return transport.Envelope{ID: m.ID, Type: m.Type, CorrelationID: m.CorrelationID, CausationID: m.CausationID,
		IdempotencyKey: m.IdempotencyKey, Headers: m.Headers, SentAt: m.SentAt, Body: body}, nil
}

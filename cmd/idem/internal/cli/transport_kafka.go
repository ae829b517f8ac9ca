package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/torture"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/kafka"
)

// openKafka is the Kafka entry's open: the namespace names the topic and
// the consumer group. With a lease given (idem torture's 2s), a crashed
// process's partitions move after three leases, from 6s (the brokers'
// default group.min.session.timeout.ms) to 45s (Kafka's default).
func openKafka(ctx context.Context, spec, _ string, o transportOptions) (transport.Transport, func(), error) {
	cfg := &kafka.Config{Topic: o.Namespace, Lease: o.Lease, Logger: o.Logger, Partitions: o.Partitions}
	if o.Lease > 0 {
		cfg.SessionTimeout = min(max(6*time.Second, 3*o.Lease), 45*time.Second)
	}
	tr, err := kafka.Open(ctx, spec, cfg)
	if err != nil {
		return nil, nil, err
	}
	return tr, func() { _ = tr.Close() }, nil
}

// The Kafka transport counts its backlog and deletes its namespace itself,
// as idem torture asks.
var (
	_ transport.PendingCounter = (*kafka.Transport)(nil)
	_ torture.NamespaceDeleter = (*kafka.Transport)(nil)
)

// benchKafka is the Kafka entry's bench: an opener of throwaway topics
// (deleted, with their group, on Close).
func benchKafka(_ context.Context, spec string) (benchOpener, func(), error) {
	return func(ctx context.Context, ns string, types []string) (transport.Transport, error) {
		cfg := &kafka.Config{Topic: ns}
		tr, err := kafka.Open(ctx, spec, cfg)
		if err != nil {
			return nil, fmt.Errorf("transport %s: %w", redactURL(spec), err)
		}
		return &kafkaThrowaway{Transport: tr, url: spec, cfg: cfg, types: types}, nil
	}, func() {}, nil
}

// kafkaThrowaway is a Kafka transport on a topic deleted on Close, whose
// Receive hands out only the given message types; the others (the events
// the benchmark's saga emits) are acknowledged and dropped.
type kafkaThrowaway struct {
	*kafka.Transport
	url   string
	cfg   *kafka.Config
	types []string
}

func (t *kafkaThrowaway) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	return t.keep(ctx, func() ([]transport.Delivery, error) { return t.Transport.Receive(ctx, max) })
}

func (t *kafkaThrowaway) ReceivePartition(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	return t.keep(ctx, func() ([]transport.Delivery, error) { return t.Transport.ReceivePartition(ctx, max, part, parts) })
}

// keep is keepTypes on t's types.
func (t *kafkaThrowaway) keep(ctx context.Context, receive func() ([]transport.Delivery, error)) ([]transport.Delivery, error) {
	return keepTypes(ctx, t.types, receive, t.Transport.Ack)
}

// Close leaves the group, then deletes the topic and the group: a group
// with a member cannot be deleted.
func (t *kafkaThrowaway) Close() error {
	err := t.Transport.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(err, kafka.DeleteNamespace(ctx, t.url, t.cfg))
}

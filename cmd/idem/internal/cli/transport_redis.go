package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/cmd/idem/internal/torture"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/redisstreams"
)

// go-redis prints its connection pool's dial failures with the standard
// log package; in the idem command they go to slog at debug level, since
// the transport itself logs an outage once, and its end.
func init() { redis.SetLogger(redisLog{}) }

type redisLog struct{}

func (redisLog) Printf(ctx context.Context, format string, v ...any) {
	slog.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}

// openRedis is the Redis entry's open.
func openRedis(ctx context.Context, spec, _ string, o transportOptions) (transport.Transport, func(), error) {
	tr, err := redisstreams.Open(ctx, spec, &redisstreams.Config{Namespace: o.Namespace, Lease: o.Lease, Logger: o.Logger, Partitions: o.Partitions})
	if err != nil {
		return nil, nil, err
	}
	return tr, func() { _ = tr.Close() }, nil
}

// The Redis transport counts its backlog and deletes its namespace itself,
// as idem torture asks.
var (
	_ transport.PendingCounter = (*redisstreams.Transport)(nil)
	_ torture.NamespaceDeleter = (*redisstreams.Transport)(nil)
)

// benchRedis is the Redis entry's bench: an opener of throwaway namespaces
// (deleted on Close).
func benchRedis(_ context.Context, spec string) (benchOpener, func(), error) {
	return func(ctx context.Context, ns string, types []string) (transport.Transport, error) {
		tr, err := redisstreams.Open(ctx, spec, &redisstreams.Config{Namespace: ns})
		if err != nil {
			return nil, fmt.Errorf("transport %s: %w", redactURL(spec), err)
		}
		return &redisThrowaway{Transport: tr, types: types}, nil
	}, func() {}, nil
}

// redisThrowaway is a Redis transport on a namespace deleted on Close,
// whose Receive hands out only the given message types. Every type shares
// the partition streams, so the others (the events the benchmark's saga
// emits, which another service would consume) are acknowledged and
// dropped here, without touching the database.
type redisThrowaway struct {
	*redisstreams.Transport
	types []string
}

func (t *redisThrowaway) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	return t.keep(ctx, func() ([]transport.Delivery, error) { return t.Transport.Receive(ctx, max) })
}

func (t *redisThrowaway) ReceivePartition(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	return t.keep(ctx, func() ([]transport.Delivery, error) { return t.Transport.ReceivePartition(ctx, max, part, parts) })
}

// keep is keepTypes on t's types.
func (t *redisThrowaway) keep(ctx context.Context, receive func() ([]transport.Delivery, error)) ([]transport.Delivery, error) {
	return keepTypes(ctx, t.types, receive, t.Transport.Ack)
}

func (t *redisThrowaway) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := t.DeleteNamespace(ctx)
	return errors.Join(err, t.Transport.Close())
}

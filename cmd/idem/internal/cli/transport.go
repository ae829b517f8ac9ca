package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/torture"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
	"github.com/idemhq/idem/transport/natsjs/natsembed"
	"github.com/idemhq/idem/transport/rabbitmq"
)

// Transport specs accepted by --transport (and IDEM_TRANSPORT):
//
//	""                 none: the store is also the queue (SQLite, PostgreSQL)
//	"nats://host:4222" an external NATS JetStream server; comma-separate the
//	                   URLs of a cluster ("nats://a:4222,nats://b:4222")
//	"nats-embedded"    nats-server started in this process, JetStream files
//	                   under <data dir>/nats, fsync before every ack
//	"amqp://user:pass@host:5672/vhost"
//	                   RabbitMQ (amqps:// for TLS); comma-separate the URLs
//	                   of a cluster's nodes
//	"redis://user:pass@host:6379/0"
//	                   Redis Streams (rediss:// for TLS)
const transportEmbedded = "nats-embedded"

// isAMQP reports whether spec names RabbitMQ.
func isAMQP(spec string) bool {
	return strings.HasPrefix(spec, "amqp://") || strings.HasPrefix(spec, "amqps://")
}

// natsServer returns the NATS URL of a transport spec, starting an embedded
// server under dataDir for "nats-embedded". stop shuts down what was
// started (nothing for an external server).
func natsServer(ctx context.Context, spec, dataDir string) (url string, stop func(), err error) {
	switch {
	case spec == transportEmbedded:
		if dataDir == "" {
			return "", nil, usageErrorf("--transport %s needs a data directory for the JetStream files", transportEmbedded)
		}
		srv, err := natsembed.Start(ctx, filepath.Join(dataDir, "nats"), nil)
		if err != nil {
			return "", nil, err
		}
		return srv.URL(), srv.Shutdown, nil
	case strings.HasPrefix(spec, "nats://") || strings.HasPrefix(spec, "tls://"):
		return spec, func() {}, nil
	default:
		return "", nil, usageErrorf("unsupported transport %q: use nats://host:4222 (comma-separated for a cluster), %s, amqp://user:pass@host:5672/vhost or redis://user:pass@host:6379/0", redactURL(spec), transportEmbedded)
	}
}

// openTransport opens the transport that spec names, with an embedded
// server's files under dataDir. For "" it returns a nil transport: the
// caller uses the store's own queue. The returned function closes the
// transport and stops an embedded server; call it after the engine stopped.
func openTransport(ctx context.Context, spec, dataDir string) (transport.Transport, func(), error) {
	return openTransportWith(ctx, spec, dataDir, transportOptions{})
}

// transportOptions change openTransportWith's defaults; the zero value
// keeps every transport's own (what idem serve uses).
type transportOptions struct {
	// Namespace is the JetStream stream or the RabbitMQ namespace.
	Namespace string
	// Lease is the JetStream AckWait or the RabbitMQ lease.
	Lease time.Duration
	// Logger receives the transport's logs; nil means slog.Default().
	Logger *slog.Logger
	// Replicas is the JetStream stream's replica count: created with it, or
	// refused when an existing stream has fewer. Zero means 1.
	Replicas int
	// Partitions is the RabbitMQ or Redis partition count; zero means
	// its default.
	Partitions int
	// PublishOnly opens JetStream for publishing only: the stream must
	// exist and the engines' consumer is left alone.
	PublishOnly bool
}

// openTransportWith is openTransport with options.
func openTransportWith(ctx context.Context, spec, dataDir string, o transportOptions) (transport.Transport, func(), error) {
	if spec == "" {
		return nil, func() {}, nil
	}
	if isRedis(spec) {
		return openRedis(ctx, spec, o)
	}
	if isAMQP(spec) {
		tr, err := rabbitmq.Open(ctx, spec, &rabbitmq.Config{Namespace: o.Namespace, Lease: o.Lease, Logger: o.Logger, Partitions: o.Partitions})
		if err != nil {
			return nil, nil, err
		}
		return tr, func() { _ = tr.Close() }, nil
	}
	url, stop, err := natsServer(ctx, spec, dataDir)
	if err != nil {
		return nil, nil, err
	}
	tr, err := natsjs.Open(ctx, url, &natsjs.Config{Stream: o.Namespace, AckWait: o.Lease, Logger: o.Logger, Replicas: o.Replicas, PublishOnly: o.PublishOnly})
	if err != nil {
		stop()
		return nil, nil, err
	}
	return tr, func() { _ = tr.Close(); stop() }, nil
}

// transportLabel names a transport spec for logs, without credentials.
func transportLabel(spec string) string {
	if spec == "" {
		return "store queue"
	}
	return redactURL(spec)
}

// transportName is a short name of a transport spec for reports: its
// scheme, or nats-embedded.
func transportName(spec string) string {
	if scheme, _, ok := strings.Cut(spec, "://"); ok {
		return map[string]string{"nats": "nats", "tls": "nats", "amqp": "rabbitmq", "amqps": "rabbitmq", "redis": "redis", "rediss": "redis"}[scheme]
	}
	return spec
}

// benchTransport returns, for idem bench --transport spec, a constructor of
// throwaway JetStream namespaces (deleted on Close) and a function that
// stops an embedded server and removes its files.
func benchTransport(ctx context.Context, spec string) (func(ctx context.Context, ns string, types []string) (transport.Transport, error), func(), error) {
	if isRedis(spec) {
		return redisBench(spec), func() {}, nil
	}
	if isAMQP(spec) {
		open := func(ctx context.Context, ns string, types []string) (transport.Transport, error) {
			cfg := &rabbitmq.Config{Namespace: ns}
			tr, err := rabbitmq.Open(ctx, spec, cfg)
			if err != nil {
				return nil, fmt.Errorf("transport %s: %w", redactURL(spec), err)
			}
			return &amqpThrowaway{Transport: tr, url: spec, cfg: cfg, types: types}, nil
		}
		return open, func() {}, nil
	}
	dir := ""
	if spec == transportEmbedded {
		var err error
		if dir, err = os.MkdirTemp("", "idem-bench-nats-"); err != nil {
			return nil, nil, err
		}
	}
	url, stop, err := natsServer(ctx, spec, dir)
	if err != nil {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
		return nil, nil, err
	}
	open := func(ctx context.Context, ns string, types []string) (transport.Transport, error) {
		tr, err := natsjs.Open(ctx, url, &natsjs.Config{Stream: ns, Types: types})
		if err != nil {
			return nil, fmt.Errorf("transport %s: %w", redactURL(spec), err)
		}
		return &throwaway{tr}, nil
	}
	return open, func() {
		stop()
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}, nil
}

// throwaway is a JetStream transport whose stream is deleted on Close.
type throwaway struct{ *natsjs.Transport }

func (t *throwaway) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := t.DeleteStream(ctx)
	if cerr := t.Transport.Close(); err == nil {
		err = cerr
	}
	return err
}

// idem torture opens its publishers' and workers' transports as idem
// serve does, in the run's own namespace and with the workers' lease.
func init() { torture.OpenTransport = tortureTransport }

// tortureTransport is torture.OpenTransport: spec is a nats://, amqp:// or
// redis:// URL (the torture driver runs nats-embedded itself). The transport it
// returns counts its backlog (Pending) and deletes the run's namespace
// (DeleteNamespace).
func tortureTransport(ctx context.Context, spec string, o torture.BrokerOptions) (transport.Transport, func(), error) {
	if spec == transportEmbedded {
		return nil, nil, usageErrorf("torture.OpenTransport: the torture driver starts the embedded NATS server itself and passes its URL")
	}
	tr, release, err := openTransportWith(ctx, spec, "", transportOptions{Namespace: o.Namespace, Lease: o.Lease, Logger: o.Logger})
	if err != nil {
		return nil, nil, err
	}
	switch t := tr.(type) {
	case *rabbitmq.Transport:
		return &amqpRun{Transport: t, url: spec, cfg: &rabbitmq.Config{Namespace: o.Namespace}}, release, nil
	case *natsjs.Transport:
		return &natsRun{t}, release, nil
	}
	return tr, release, nil
}

// amqpRun is a RabbitMQ transport of one torture run.
type amqpRun struct {
	*rabbitmq.Transport
	url string
	cfg *rabbitmq.Config
}

// DeleteNamespace deletes the run's exchanges and queues.
func (t *amqpRun) DeleteNamespace(ctx context.Context) error {
	return rabbitmq.DeleteNamespace(ctx, t.url, t.cfg)
}

// natsRun is a JetStream transport of one torture run.
type natsRun struct{ *natsjs.Transport }

// DeleteNamespace deletes the run's stream.
func (t *natsRun) DeleteNamespace(ctx context.Context) error { return t.DeleteStream(ctx) }

var (
	_ transport.PendingCounter = (*amqpRun)(nil)
	_ transport.PendingCounter = (*natsRun)(nil)
	_ torture.NamespaceDeleter = (*amqpRun)(nil)
	_ torture.NamespaceDeleter = (*natsRun)(nil)
)

// amqpThrowaway is a RabbitMQ transport on a namespace deleted on Close,
// whose Receive hands out only the given message types. RabbitMQ routes
// every type to the same partition queues, so the others (the events the
// benchmark's saga emits, which another service would consume) are
// acknowledged and dropped here, without touching the database.
type amqpThrowaway struct {
	*rabbitmq.Transport
	url   string
	cfg   *rabbitmq.Config
	types []string
}

func (t *amqpThrowaway) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	return t.keep(ctx, func() ([]transport.Delivery, error) { return t.Transport.Receive(ctx, max) })
}

func (t *amqpThrowaway) ReceivePartition(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	return t.keep(ctx, func() ([]transport.Delivery, error) { return t.Transport.ReceivePartition(ctx, max, part, parts) })
}

// keep receives until some deliveries are of the wanted types, acking and
// dropping the others.
func (t *amqpThrowaway) keep(ctx context.Context, receive func() ([]transport.Delivery, error)) ([]transport.Delivery, error) {
	for {
		ds, err := receive()
		if err != nil {
			return nil, err
		}
		keep, drop := ds[:0:0], []transport.Delivery(nil)
		for _, d := range ds {
			if slices.Contains(t.types, d.Envelope.Type) {
				keep = append(keep, d)
			} else {
				drop = append(drop, d)
			}
		}
		if len(drop) > 0 {
			if err := t.Transport.Ack(ctx, drop); err != nil {
				return nil, err
			}
		}
		if len(keep) > 0 {
			return keep, nil
		}
	}
}

func (t *amqpThrowaway) Close() error {
	err := t.Transport.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(err, rabbitmq.DeleteNamespace(ctx, t.url, t.cfg))
}

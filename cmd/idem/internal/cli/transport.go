package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/torture"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
	"github.com/idemhq/idem/transport/natsjs/natsembed"
	"github.com/idemhq/idem/transport/rabbitmq"
)

// transportEmbedded is the --transport spec (and IDEM_TRANSPORT) of a
// nats-server started in this process. The other specs are the URLs of the
// brokers in brokers; the empty spec is none: the store is also the queue
// (SQLite, PostgreSQL).
const transportEmbedded = "nats-embedded"

// natsServer returns the NATS URL of a transport spec, starting an embedded
// server under dataDir for "nats-embedded". stop shuts down what was
// started (nothing for an external server).
func natsServer(ctx context.Context, spec, dataDir string) (url string, stop func(), err error) {
	if spec == torture.TransportCluster {
		return "", nil, usageErrorf("--transport %s is a three-node cluster in one process, for idem bench and idem torture only: give the nats:// URLs of a real cluster", spec)
	}
	if spec != transportEmbedded {
		return spec, func() {}, nil
	}
	if dataDir == "" {
		return "", nil, usageErrorf("--transport %s needs a data directory for the JetStream files", transportEmbedded)
	}
	srv, err := natsembed.Start(ctx, filepath.Join(dataDir, "nats"), nil)
	if err != nil {
		return "", nil, err
	}
	return srv.URL(), srv.Shutdown, nil
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

// openTransportWith is openTransport with options: the broker spec names
// opens through its entry in brokers.
func openTransportWith(ctx context.Context, spec, dataDir string, o transportOptions) (transport.Transport, func(), error) {
	if spec == "" {
		return nil, func() {}, nil
	}
	b, err := brokerFor(spec)
	if err != nil {
		return nil, nil, err
	}
	return b.open(ctx, spec, dataDir, o)
}

// transportLabel names a transport spec for logs, without credentials.
func transportLabel(spec string) string {
	if spec == "" {
		return "store queue"
	}
	return redactURL(spec)
}

// transportName is a short name of a transport spec for reports: its
// broker's name, or nats-embedded.
func transportName(spec string) string {
	if spec == transportEmbedded || spec == torture.TransportCluster {
		return spec
	}
	if b, err := brokerFor(spec); err == nil {
		return b.name
	}
	return ""
}

// benchTransport returns, for idem bench --transport spec, a constructor of
// throwaway namespaces (deleted on Close) and a function that stops what
// it started.
func benchTransport(ctx context.Context, spec string) (benchOpener, func(), error) {
	b, err := brokerFor(spec)
	if err != nil {
		return nil, nil, err
	}
	return b.bench(ctx, spec)
}

// openNATS is the NATS entry's open.
func openNATS(ctx context.Context, spec, dataDir string, o transportOptions) (transport.Transport, func(), error) {
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

// benchNATS is the NATS entry's bench: an embedded server (nats-embedded)
// or three-node cluster (nats-cluster, streams of three replicas) in a
// temporary directory, removed by stop.
func benchNATS(ctx context.Context, spec string) (benchOpener, func(), error) {
	dir := ""
	if spec == transportEmbedded || spec == torture.TransportCluster {
		var err error
		if dir, err = os.MkdirTemp("", "idem-bench-nats-"); err != nil {
			return nil, nil, err
		}
	}
	url, replicas, stop, err := benchNATSServer(ctx, spec, dir)
	if err != nil {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
		return nil, nil, err
	}
	open := func(ctx context.Context, ns string, types []string) (transport.Transport, error) {
		tr, err := natsjs.Open(ctx, url, &natsjs.Config{Stream: ns, Types: types, Replicas: replicas})
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

// benchNATSServer starts the cluster of nats-cluster, with streams of
// three replicas, or is natsServer.
func benchNATSServer(ctx context.Context, spec, dir string) (url string, replicas int, stop func(), err error) {
	if spec != torture.TransportCluster {
		url, stop, err = natsServer(ctx, spec, dir)
		return url, 1, stop, err
	}
	c, err := natsembed.StartCluster(ctx, dir, "bench")
	if err != nil {
		return "", 0, nil, err
	}
	return c.URL(), natsembed.ClusterSize, c.Shutdown, nil
}

// openRabbitMQ is the RabbitMQ entry's open.
func openRabbitMQ(ctx context.Context, spec, _ string, o transportOptions) (transport.Transport, func(), error) {
	tr, err := rabbitmq.Open(ctx, spec, &rabbitmq.Config{Namespace: o.Namespace, Lease: o.Lease, Logger: o.Logger, Partitions: o.Partitions})
	if err != nil {
		return nil, nil, err
	}
	return tr, func() { _ = tr.Close() }, nil
}

// benchRabbitMQ is the RabbitMQ entry's bench.
func benchRabbitMQ(_ context.Context, spec string) (benchOpener, func(), error) {
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

// tortureTransport is idem torture's torture.TransportOpener, in the driver
// and in its workers: it opens a broker as idem serve does, in the run's
// own namespace and with the workers' lease. spec is a broker URL (the
// torture driver runs nats-embedded itself). The transport it returns
// counts its backlog (Pending) and deletes the run's namespace
// (DeleteNamespace): its entry in brokers wraps it so.
func tortureTransport(ctx context.Context, spec string, o torture.BrokerOptions) (transport.Transport, func(), error) {
	if spec == transportEmbedded || spec == torture.TransportCluster {
		return nil, nil, usageErrorf("idem torture's transport opener: the torture driver starts the embedded NATS server or cluster itself and passes its URL")
	}
	b, err := brokerFor(spec)
	if err != nil {
		return nil, nil, err
	}
	tr, release, err := b.open(ctx, spec, "", transportOptions{Namespace: o.Namespace, Lease: o.Lease, Logger: o.Logger, Replicas: o.Replicas})
	if err != nil {
		return nil, nil, err
	}
	if b.torture != nil {
		tr = b.torture(tr, spec, o)
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

// keep is keepTypes on t's types.
func (t *amqpThrowaway) keep(ctx context.Context, receive func() ([]transport.Delivery, error)) ([]transport.Delivery, error) {
	return keepTypes(ctx, t.types, receive, t.Transport.Ack)
}

func (t *amqpThrowaway) Close() error {
	err := t.Transport.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(err, rabbitmq.DeleteNamespace(ctx, t.url, t.cfg))
}

package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/idemhq/idem/cmd/idem/internal/torture"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
	"github.com/idemhq/idem/transport/rabbitmq"
)

// benchOpener opens a throwaway namespace of a broker for idem bench: it
// receives only the given message types and is deleted on Close.
type benchOpener = func(ctx context.Context, ns string, types []string) (transport.Transport, error)

// A broker is one kind of message broker the idem command runs beside its
// store, named by the schemes of its --transport URLs. Every command opens
// it through its entry in brokers (idem serve and the operations commands
// through open, idem bench through bench, idem torture through open and
// torture), so a new broker is one more entry.
type broker struct {
	// name is its short name in reports ("nats", "rabbitmq", "redis").
	name string
	// schemes are the URL schemes that name it; "nats-embedded" names
	// the NATS entry too.
	schemes []string
	// example is a --transport URL of it, for flag help; spec says how
	// --transport names it, for errors.
	example, spec string
	// open opens it with o, an embedded server's files under dataDir; the
	// function it returns closes the transport and stops what it started.
	open func(ctx context.Context, spec, dataDir string, o transportOptions) (transport.Transport, func(), error)
	// bench returns idem bench's opener of throwaway namespaces and what
	// stops what it started.
	bench func(ctx context.Context, spec string) (benchOpener, func(), error)
	// replica, if set, opens a replica's transport on the namespace of an
	// idem bench --replicas sweep, which the sweep deletes itself; nil when
	// the sweep does not run on this broker.
	replica func(ctx context.Context, spec, ns string, types []string) (transport.Transport, error)
	// torture, if set, wraps what open returned for one idem torture run,
	// so that it counts its backlog (transport.PendingCounter) and deletes
	// the run's namespace (torture.NamespaceDeleter); nil when the
	// transport does both itself.
	torture func(tr transport.Transport, spec string, o torture.BrokerOptions) transport.Transport
}

// brokers is every broker the idem command runs beside its store, in the
// order help and errors list them. The empty spec is none: the store is
// also the queue (SQLite, PostgreSQL).
var brokers = []*broker{
	{
		name:    "nats",
		example: "nats://host:4222",
		schemes: []string{"nats", "tls"},
		spec: "nats://host:4222 (comma-separate the URLs of a cluster), or " + transportEmbedded +
			" for nats-server started in this process, with its JetStream files under <data dir>/nats and fsync before every ack (" +
			torture.TransportCluster + ", three such servers as a cluster, in idem bench and idem torture only)",
		open:    openNATS,
		bench:   benchNATS,
		replica: replicaNATS,
		torture: func(tr transport.Transport, _ string, _ torture.BrokerOptions) transport.Transport {
			return &natsRun{tr.(*natsjs.Transport)}
		},
	},
	{
		name:    "rabbitmq",
		example: "amqp://user:pass@host:5672/vhost",
		schemes: []string{"amqp", "amqps"},
		spec:    "amqp://user:pass@host:5672/vhost (amqps:// for TLS; comma-separate the URLs of a cluster's nodes)",
		open:    openRabbitMQ,
		bench:   benchRabbitMQ,
		replica: replicaRabbitMQ,
		torture: func(tr transport.Transport, spec string, o torture.BrokerOptions) transport.Transport {
			return &amqpRun{Transport: tr.(*rabbitmq.Transport), url: spec, cfg: &rabbitmq.Config{Namespace: o.Namespace}}
		},
	},
	{
		name:    "redis",
		example: "redis://user:pass@host:6379/0",
		schemes: []string{"redis", "rediss"},
		spec:    "redis://user:pass@host:6379/0 (rediss:// for TLS), Redis Streams",
		open:    openRedis,
		bench:   benchRedis,
	},
	{
		name:    "kafka",
		example: "kafka://host:9092",
		schemes: []string{"kafka"},
		spec:    "kafka://host:9092 (comma-separate the seed brokers: kafka://host1:9092,host2:9092), a topic and consumer group named by the namespace",
		open:    openKafka,
		bench:   benchKafka,
	},
}

// brokerFor returns the entry of brokers that spec names, or a usage error
// listing them.
func brokerFor(spec string) (*broker, error) {
	scheme := "nats"
	if spec != transportEmbedded && spec != torture.TransportCluster {
		scheme, _, _ = strings.Cut(spec, "://")
		scheme = strings.ToLower(scheme)
	}
	for _, b := range brokers {
		for _, s := range b.schemes {
			if s == scheme && (strings.Contains(spec, "://") || spec == transportEmbedded || spec == torture.TransportCluster) {
				return b, nil
			}
		}
	}
	return nil, usageErrorf("unsupported transport %q: use %s", redactURL(spec), brokerSpecs())
}

// brokerSpecs lists the --transport specs of brokers, for help and errors.
func brokerSpecs() string {
	specs := make([]string, len(brokers))
	for i, b := range brokers {
		specs[i] = b.spec
	}
	return strings.Join(specs, "; ")
}

// brokerExamples lists an example --transport URL of each broker, then
// extra specs (nats-embedded where a command accepts it), for flag help:
// "a, b or c".
func brokerExamples(extra ...string) string {
	var ex []string
	for _, b := range brokers {
		ex = append(ex, b.example)
	}
	ex = append(ex, extra...)
	return strings.Join(ex[:len(ex)-1], ", ") + " or " + ex[len(ex)-1]
}

// replicaNATS is the NATS entry's replica.
func replicaNATS(ctx context.Context, spec, ns string, types []string) (transport.Transport, error) {
	tr, err := natsjs.Open(ctx, spec, &natsjs.Config{Stream: ns, Types: types})
	if err != nil {
		return nil, fmt.Errorf("transport %s: %w", redactURL(spec), err)
	}
	return tr, nil
}

// replicaRabbitMQ is the RabbitMQ entry's replica.
func replicaRabbitMQ(ctx context.Context, spec, ns string, types []string) (transport.Transport, error) {
	cfg := &rabbitmq.Config{Namespace: ns}
	tr, err := rabbitmq.Open(ctx, spec, cfg)
	if err != nil {
		return nil, fmt.Errorf("transport %s: %w", redactURL(spec), err)
	}
	return &amqpReplica{amqpThrowaway{Transport: tr, url: spec, cfg: cfg, types: types}}, nil
}

// amqpReplica is an amqpThrowaway whose Close leaves the namespace.
type amqpReplica struct{ amqpThrowaway }

// Close closes the connection only.
func (t *amqpReplica) Close() error { return t.Transport.Close() }

// keepTypes receives until some deliveries are of the given types,
// acknowledging and dropping the others: idem bench's throwaway namespaces
// on brokers that route every type to the same partitions, where the
// events the benchmark's saga emits (which another service would consume)
// come back to its receivers.
func keepTypes(ctx context.Context, types []string, receive func() ([]transport.Delivery, error), ack func(context.Context, []transport.Delivery) error) ([]transport.Delivery, error) {
	for {
		ds, err := receive()
		if err != nil {
			return nil, err
		}
		var keep, drop []transport.Delivery
		for _, d := range ds {
			if slices.Contains(types, d.Envelope.Type) {
				keep = append(keep, d)
			} else {
				drop = append(drop, d)
			}
		}
		if len(drop) > 0 {
			if err := ack(ctx, drop); err != nil {
				return nil, err
			}
		}
		if len(keep) > 0 {
			return keep, nil
		}
	}
}

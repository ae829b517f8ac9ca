package cli

import (
	"context"
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
			" for nats-server started in this process, with its JetStream files under <data dir>/nats and fsync before every ack",
		open:  openNATS,
		bench: benchNATS,
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
	if spec != transportEmbedded {
		scheme, _, _ = strings.Cut(spec, "://")
		scheme = strings.ToLower(scheme)
	}
	for _, b := range brokers {
		for _, s := range b.schemes {
			if s == scheme && (strings.Contains(spec, "://") || spec == transportEmbedded) {
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

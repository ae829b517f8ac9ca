package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemhq/idem/transport"
)

// Config configures a Transport. The zero value means the defaults given
// in each field's comment.
type Config struct {
	// Topic is the Kafka topic that carries the application's messages.
	// Replicas of one application share it. Letters, digits, '_', '-' and
	// '.', at most 200 bytes. Default "idem".
	Topic string
	// Group is the consumer group every replica consumes the topic as;
	// Kafka hands each partition to one member at a time. Same characters
	// as Topic. Default: Topic.
	Group string
	// Partitions is how many partitions Open creates the topic with when it
	// does not exist; a saga key always goes to the same one. Open refuses
	// a topic with another count. Use a multiple of the engine's
	// idem.Config.Consumers. Default 16, at most 1024.
	Partitions int
	// ReplicationFactor is the replication factor of a topic Open creates;
	// -1 (the default) is the broker's default.replication.factor.
	ReplicationFactor int
	// Lease is how long a delivery handed out by Receive may stay
	// unsettled before this process hands it out again (Kafka has no
	// per-message visibility timeout; the lease is kept in this process).
	// It also bounds how long a rebalance waits for deliveries in flight
	// on a partition being given up. Default 1m; at most half of
	// RebalanceTimeout.
	Lease time.Duration
	// RebalanceTimeout is how long the group waits for its members to
	// rejoin during a rebalance (kgo.RebalanceTimeout); a member that has
	// not rejoined by then (a crashed process) is dropped from the group.
	// At least twice Lease: a member gives a partition up after waiting
	// up to a lease for its work in flight. Default the larger of 10s and
	// 2×Lease.
	RebalanceTimeout time.Duration
	// SessionTimeout is how long the group's coordinator waits for a
	// member's heartbeat before it takes the member's partitions away
	// (kgo.SessionTimeout): how long the partitions of a crashed process
	// wait. Within the broker's group.min.session.timeout.ms and
	// group.max.session.timeout.ms (6s and 30m by default). Default 45s.
	SessionTimeout time.Duration
	// MaxMessageBytes is the largest Envelope.Body Publish accepts; a
	// larger one is refused with an error wrapping transport.ErrTooLarge.
	// The rest of the envelope travels in a header and may take up to
	// 64 KiB more. Keep it under the broker's message.max.bytes (1 MiB by
	// default) minus 64 KiB. Default 900 KiB.
	MaxMessageBytes int
	// MaxBuffered is how many fetched and uncommitted records a Transport
	// holds at most per partition, handed out, waiting to be, or acked
	// behind an unsettled one: a partition that holds that many is not
	// fetched until its oldest records are settled; the others keep
	// flowing. Default 1024.
	MaxBuffered int
	// ClientID is the Kafka client id. Default "idem".
	ClientID string
	// Logger receives fetch errors, undecodable records and franz-go's
	// warnings. Nil means slog.Default().
	Logger *slog.Logger
	// Opts are further franz-go options for both clients (TLS with
	// kgo.DialTLSConfig, SASL with kgo.SASL, ...), applied after the
	// transport's own: do not override the group, commit or partitioner
	// options the transport sets.
	Opts []kgo.Opt
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,200}$`)

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Topic == "" {
		out.Topic = "idem"
	}
	if out.Group == "" {
		out.Group = out.Topic
	}
	if out.Partitions == 0 {
		out.Partitions = 16
	}
	if out.ReplicationFactor == 0 {
		out.ReplicationFactor = -1
	}
	if out.Lease == 0 {
		out.Lease = time.Minute
	}
	if out.RebalanceTimeout == 0 {
		out.RebalanceTimeout = max(10*time.Second, 2*out.Lease)
	}
	if out.SessionTimeout == 0 {
		out.SessionTimeout = 45 * time.Second
	}
	if out.MaxMessageBytes == 0 {
		out.MaxMessageBytes = 900 << 10
	}
	if out.MaxBuffered == 0 {
		out.MaxBuffered = 1024
	}
	if out.ClientID == "" {
		out.ClientID = "idem"
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, out.validate()
}

func (c *Config) validate() error {
	for _, n := range []struct{ field, v string }{{"Topic", c.Topic}, {"Group", c.Group}} {
		if !nameRE.MatchString(n.v) || n.v == "." || n.v == ".." {
			return fmt.Errorf("kafka: Config.%s %q: use 1 to 200 letters, digits, '_', '-' and '.' (not \".\" or \"..\")", n.field, n.v)
		}
	}
	switch {
	case c.Partitions < 1 || c.Partitions > 1024:
		return fmt.Errorf("kafka: Config.Partitions is %d: use 1 to 1024", c.Partitions)
	case c.ReplicationFactor < -1 || c.ReplicationFactor == 0 || c.ReplicationFactor > 32767:
		return fmt.Errorf("kafka: Config.ReplicationFactor is %d: use -1 (the broker's default) or 1 to 32767", c.ReplicationFactor)
	case c.Lease < 10*time.Millisecond:
		return fmt.Errorf("kafka: Config.Lease is %v: use 10ms or more", c.Lease)
	case c.RebalanceTimeout < 2*c.Lease:
		return fmt.Errorf("kafka: Config.RebalanceTimeout (%v) is under twice Config.Lease (%v): a rebalance waits up to a lease for work in flight; raise RebalanceTimeout or lower Lease", c.RebalanceTimeout, c.Lease)
	case c.SessionTimeout < time.Second:
		return fmt.Errorf("kafka: Config.SessionTimeout is %v: use 1s or more (brokers refuse less than group.min.session.timeout.ms, 6s by default)", c.SessionTimeout)
	case c.MaxMessageBytes < 1 || c.MaxMessageBytes > 100<<20:
		return fmt.Errorf("kafka: Config.MaxMessageBytes is %d: use 1 to 100 MiB, within the broker's message.max.bytes less 64 KiB", c.MaxMessageBytes)
	case c.MaxBuffered < 1:
		return fmt.Errorf("kafka: Config.MaxBuffered is %d: use 1 or more", c.MaxBuffered)
	}
	return nil
}

// metaRoom is what the envelope's header, key and the record's framing may
// take beside the body.
const metaRoom = 64 << 10

// Transport is a transport.Transport, transport.PartitionedConsumer,
// transport.LeaseExtender, transport.SizeLimiter and
// transport.PendingCounter on one Kafka topic, consumed by one consumer
// group. It is safe for concurrent use.
type Transport struct {
	cfg   Config
	seeds []string
	safe  string
	log   *slog.Logger

	producer *kgo.Client

	// The consumer starts with the first Receive, so that a Transport
	// that only publishes never joins the group.
	startOnce sync.Once
	startErr  error
	consumer  *kgo.Client
	pollDone  chan struct{}
	flushDone chan struct{}
	stopPoll  context.CancelFunc

	mu       sync.Mutex
	closed   bool
	done     chan struct{}
	changed  chan struct{}    // closed and replaced when the buffer changes
	parts    map[int32]*part  // the partitions this member owns
	epoch    uint64           // the last assignment's number
	rr       int              // where the next Receive starts looking
	onDrain  func(ps []int32) // tests: a revoke started draining
	drained  func(ps []int32) // tests: a revoke finished
	commitMu sync.Mutex       // serialises commits, so that none rewinds another
	// commitFailing is set while commits fail, so that the failure is
	// logged once.
	commitFailing bool
}

var (
	_ transport.Transport           = (*Transport)(nil)
	_ transport.PartitionedConsumer = (*Transport)(nil)
	_ transport.LeaseExtender       = (*Transport)(nil)
	_ transport.SizeLimiter         = (*Transport)(nil)
	_ transport.Describer           = (*Transport)(nil)
)

// Open connects to the Kafka cluster at rawURL
// (kafka://host1:9092,host2:9092: the seed brokers), creates cfg's topic
// with cfg.Partitions partitions when it does not exist, and refuses one
// with another partition count. The producer is idempotent (franz-go's
// default, with acks from all in-sync replicas). The consumer joins the
// group with the first Receive.
func Open(ctx context.Context, rawURL string, cfg *Config) (*Transport, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	seeds, safe, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	t := &Transport{cfg: c, seeds: seeds, safe: safe, log: c.Logger, done: make(chan struct{}), changed: make(chan struct{}), parts: map[int32]*part{}}
	t.producer, err = kgo.NewClient(t.producerOpts()...)
	if err != nil {
		return nil, fmt.Errorf("kafka: producer for %s: %w", safe, err)
	}
	if err := t.declare(ctx); err != nil {
		t.producer.Close()
		return nil, err
	}
	return t, nil
}

// ParseURL returns the seed brokers of a kafka:// URL
// (kafka://host1:9092,host2:9092) and the URL's form for messages.
func ParseURL(rawURL string) (seeds []string, safe string, err error) {
	u, perr := url.Parse(rawURL)
	if perr != nil || u.Scheme != "kafka" || u.Host == "" {
		return nil, "(unparsable URL)", errors.New("kafka: the URL is not kafka://host:9092 (comma-separate the seed brokers: kafka://host1:9092,host2:9092)")
	}
	safe = u.Redacted()
	if u.User != nil {
		return nil, safe, fmt.Errorf("kafka: the URL %s has user information: the transport does not read credentials from the URL; pass SASL and TLS options in Config.Opts (kgo.SASL, kgo.DialTLSConfig)", safe)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, safe, fmt.Errorf("kafka: the URL %s has a path, query or fragment: give only the seed brokers (kafka://host1:9092,host2:9092); the topic and group are Config.Topic and Config.Group", safe)
	}
	for _, s := range strings.Split(u.Host, ",") {
		if s = strings.TrimSpace(s); s != "" {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		return nil, safe, fmt.Errorf("kafka: the URL %s names no broker", safe)
	}
	return seeds, safe, nil
}

func (t *Transport) commonOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(t.seeds...),
		kgo.ClientID(t.cfg.ClientID),
		kgo.WithLogger(kgoLogger{t.log}),
	}
}

// producerOpts: idempotent (franz-go's default) with acks from every
// in-sync replica, each record to the partition Publish chose.
func (t *Transport) producerOpts() []kgo.Opt {
	opts := append(t.commonOpts(),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(int32(t.cfg.MaxMessageBytes+metaRoom)),
		kgo.DefaultProduceTopic(t.cfg.Topic),
	)
	return append(opts, t.cfg.Opts...)
}

// Describe implements transport.Describer: system "kafka", the topic as
// destination, the consumer group.
func (t *Transport) Describe() transport.Description {
	return transport.Description{System: "kafka", Destination: t.cfg.Topic, ConsumerGroup: t.cfg.Group}
}

// MaxMessageBytes is Config.MaxMessageBytes (transport.SizeLimiter).
func (t *Transport) MaxMessageBytes() int { return t.cfg.MaxMessageBytes }

// LeaseDuration is Config.Lease (transport.LeaseExtender).
func (t *Transport) LeaseDuration() time.Duration { return t.cfg.Lease }

// Topic returns the topic the transport publishes to and consumes.
func (t *Transport) Topic() string { return t.cfg.Topic }

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Close stops the transport: blocked Receives return transport.ErrClosed
// and every method afterwards returns it too. The consumer commits the
// acknowledged prefix of each partition it owns and leaves the group, so
// that the others take its partitions over at once; deliveries handed out
// and not settled are handed out again by the new owner. Close is
// idempotent.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.done)
	t.mu.Unlock()
	t.startOnce.Do(func() {}) // no consumer starts after Close
	if t.consumer != nil {
		t.stopPoll()
		<-t.pollDone
		<-t.flushDone
		// Leaving the group revokes every partition: the revoke commits
		// the acknowledged prefixes (without waiting, as it is closing).
		t.consumer.CloseAllowingRebalance()
	}
	t.producer.Close()
	return nil
}

// kgoLogger passes franz-go's warnings and errors to slog.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelWarn
	if level == kgo.LogLevelError {
		lv = slog.LevelError
	}
	k.l.Log(context.Background(), lv, "kafka: franz-go: "+msg, keyvals...)
}

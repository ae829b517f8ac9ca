package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/transport"
)

// Config configures a Transport. The zero value means every default; each
// field states its own.
type Config struct {
	// Stream names the JetStream stream of this Idem namespace; its subjects
	// are "<Stream>.>". Letters, digits, '_' and '-'. Default "IDEM".
	Stream string
	// Consumer starts the names of the durable pull consumers, one per
	// partition ("<Consumer>-p<i>"), shared by every Transport of the
	// namespace. Letters, digits, '_' and '-'. Default "idem".
	Consumer string
	// Replicas is the number of stream replicas Open creates the stream
	// with, and the least it accepts on an existing stream. Default 1; use 3
	// on a three-node cluster.
	Replicas int
	// AllowMemoryStorage accepts an existing stream on memory storage,
	// which loses every message when the server restarts. Default false:
	// Open refuses such a stream.
	AllowMemoryStorage bool
	// AckWait is the visibility timeout: a delivery not settled within it
	// is handed out again. Set it above the slowest batch. Default 30s.
	// It is the consumer's AckWait, which every Transport of the consumer
	// must share: Open creates the consumer with it and refuses an existing
	// consumer with another AckWait.
	AckWait time.Duration
	// DuplicateWindow is how long the stream remembers message IDs to drop
	// re-published copies (Nats-Msg-Id). Default 2 minutes. Used when Open
	// creates the stream.
	DuplicateWindow time.Duration
	// Partitions is how many partition tokens the subjects carry, and how
	// many consumers pull them. Default 16. Use the same value on every
	// process, and a multiple of the engine's Config.Consumers (see
	// ReceivePartition). Raising it changes the subject of a key's future
	// messages, not their delivery; Open refuses to lower it below the
	// partition consumers that exist.
	Partitions int
	// Types, when set, limits the consumer to these message types (subjects
	// "<Stream>.*.<type>"); messages of other types stay in the stream for
	// another consumer. Every Transport sharing Config.Consumer must use the
	// same Types. Default: every type.
	Types []string
	// MaxAckPending bounds the deliveries of each partition's consumer
	// that are handed out and not yet settled, across all processes.
	// Default 1000.
	MaxAckPending int
	// ConnectTimeout bounds the initial connection. Default 5s.
	ConnectTimeout time.Duration
	// PublishOnly makes a Transport that only publishes, for tools that
	// put messages onto a running namespace (idem dlq replay): Open
	// requires the stream to exist and leaves the consumer as the engines
	// configured it; Receive, Ack, Nack and Pending return ErrPublishOnly.
	PublishOnly bool
	// Options are added to the connection options (credentials, TLS, …).
	Options []nats.Option
	// Logger receives the transport's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// ErrPublishOnly is returned by the consuming methods of a Transport opened
// with Config.PublishOnly.
var ErrPublishOnly = errors.New("natsjs: transport opened with Config.PublishOnly")

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Stream == "" {
		out.Stream = "IDEM"
	}
	if out.Consumer == "" {
		out.Consumer = "idem"
	}
	if !nameRE.MatchString(out.Stream) {
		return out, fmt.Errorf("natsjs: Config.Stream %q: use 1 to 64 letters, digits, '_' or '-'", out.Stream)
	}
	if !nameRE.MatchString(out.Consumer) {
		return out, fmt.Errorf("natsjs: Config.Consumer %q: use 1 to 64 letters, digits, '_' or '-'", out.Consumer)
	}
	if out.Replicas < 0 || out.AckWait < 0 || out.DuplicateWindow < 0 || out.Partitions < 0 || out.MaxAckPending < 0 || out.ConnectTimeout < 0 {
		return out, errors.New("natsjs: Config.Replicas, AckWait, DuplicateWindow, Partitions, MaxAckPending and ConnectTimeout must not be negative: use 0 for the default")
	}
	if out.Replicas == 0 {
		out.Replicas = 1
	}
	if out.Replicas > 5 {
		return out, fmt.Errorf("natsjs: Config.Replicas is %d: JetStream allows at most 5", out.Replicas)
	}
	if out.AckWait == 0 {
		out.AckWait = 30 * time.Second
	}
	if out.DuplicateWindow == 0 {
		out.DuplicateWindow = 2 * time.Minute
	}
	if out.Partitions == 0 {
		out.Partitions = 16
	}
	if out.MaxAckPending == 0 {
		out.MaxAckPending = 1000
	}
	if out.ConnectTimeout == 0 {
		out.ConnectTimeout = 5 * time.Second
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, nil
}

// Transport is a transport.Transport on a JetStream stream and durable pull
// consumer. It is safe for concurrent use. Create it with Open.
type Transport struct {
	cfg    Config
	log    *slog.Logger
	nc     *nats.Conn
	js     jetstream.JetStream
	parts  []jetstream.Consumer // by subject partition: Config.Consumer-p<i>
	all    []int                // every partition, for Receive
	margin time.Duration        // the part of AckWait in which acks are not sent
	wait   time.Duration        // how long one blocking pull request waits: AckWait/4, at most 5s

	// maxPayload is the largest NATS message, headers included, that the
	// server and the stream accept; limitBy names the setting that sets it.
	maxPayload int64
	limitBy    string

	batch  batcher      // atomic batch publishing
	stalls atomic.Int64 // publishes that found the window of unanswered asynchronous publishes full, for the tests

	closeOnce sync.Once
	closed    chan struct{}

	mu        sync.Mutex
	leases    map[uint64]*lease // by stream sequence: the latest hand-out here
	leftovers [][]pending       // by partition: brought by waiting pull requests
	waiting   []bool            // by partition: a waiting pull request is out
	arrived   chan struct{}     // closed and replaced when a waiting pull request brings a message or ends
	fetchErr  error             // the last error a waiting pull request ended with
	turn      int               // which partition a no-wait pull starts with
	pruned    time.Time
}

var (
	_ transport.Transport      = (*Transport)(nil)
	_ transport.SizeLimiter    = (*Transport)(nil)
	_ transport.PendingCounter = (*Transport)(nil)

	_ transport.PartitionedConsumer = (*Transport)(nil)
)

// ErrTooLarge is wrapped by the error Publish returns for an envelope that
// does not fit in one NATS message: its Body is longer than
// MaxMessageBytes, or its metadata does not fit beside its Body.
var ErrTooLarge = fmt.Errorf("natsjs: %w", transport.ErrTooLarge)

// HeaderReserve is the part of the server's max_payload that
// MaxMessageBytes keeps for the NATS headers of an envelope: the
// Nats-Msg-Id and Nats-Expected-Stream headers and the envelope without
// its body as JSON (ID, Type, CorrelationID, CausationID, IdempotencyKey,
// Headers, SentAt) in the Idem-Envelope header. The fixed part of these
// takes about 300 bytes (about 350 for a re-publish, whose Nats-Msg-Id
// adds a digest of its mark: transport.PublishID), so metadata fields
// (the ID counted twice) of up to about 7 KiB of plain text fit, and of up to 1 KiB whatever their
// characters (JSON escaping takes at most 6 bytes per byte).
const HeaderReserve = 8 << 10

// lease is one hand-out of a message by this Transport.
type lease struct {
	dc       uint64
	msg      jetstream.Msg
	deadline time.Time // pull request time + AckWait: the server redelivers no earlier
	settled  bool
}

// pending is a message that arrived for a pull request and was not handed
// out yet.
type pending struct {
	msg   jetstream.Msg
	start time.Time // when its pull request was sent
}

// Open connects to the NATS server or cluster at url (comma-separated URLs
// for several servers), makes sure the stream and consumer exist with
// settings that do not lose messages, and returns the Transport. cfg may be
// nil. It refuses an unreachable server, a server without JetStream, a
// stream on memory storage without Config.AllowMemoryStorage and a stream
// with fewer replicas than Config.Replicas, with an error that says what to
// change. Close the Transport when done.
func Open(ctx context.Context, url string, cfg *Config) (*Transport, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	opts := append([]nats.Option{
		nats.Name("idem"),
		nats.Timeout(c.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(-1), // fail publishes while disconnected; the outbox relay re-sends
	}, c.Options...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("natsjs: connect to %s: %w: check that the NATS server runs and the URL is right", redact(url), err)
	}
	t := &Transport{
		cfg:       c,
		log:       c.Logger.With("component", "idem.natsjs"),
		nc:        nc,
		margin:    c.AckWait / 10,
		wait:      min(5*time.Second, c.AckWait/4),
		closed:    make(chan struct{}),
		arrived:   make(chan struct{}),
		leases:    map[uint64]*lease{},
		leftovers: make([][]pending, c.Partitions),
		waiting:   make([]bool, c.Partitions),
	}
	for p := range c.Partitions {
		t.all = append(t.all, p)
	}
	t.js, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(publishTimeout))
	if err == nil {
		err = t.setup(ctx)
	}
	if err == nil && t.maxPayload <= HeaderReserve {
		err = fmt.Errorf("natsjs: %s is %d bytes, which leaves no room for a message body beside %d bytes of headers: raise it", t.limitBy, t.maxPayload, HeaderReserve)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return t, nil
}

// setup creates or checks the stream and creates or updates the consumer.
func (t *Transport) setup(ctx context.Context) error {
	c := t.cfg
	s, err := t.js.Stream(ctx, c.Stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound) && c.PublishOnly:
		return fmt.Errorf("natsjs: stream %s does not exist: check Config.Stream, or start an engine on it first", c.Stream)
	case errors.Is(err, jetstream.ErrStreamNotFound):
		s, err = t.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        c.Stream,
			Description: "Idem messages (transport/natsjs)",
			Subjects:    []string{c.Stream + ".>"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    c.Replicas,
			Duplicates:  c.DuplicateWindow,
			Discard:     jetstream.DiscardOld,
			// A few syncs per batch rather than one per message
			// (publishBatches), when the server this connection reached
			// takes batches; see useAtomic for clusters of mixed versions.
			AllowAtomicPublish: atomicServer(t.nc.ConnectedServerVersion()),
		})
		if err != nil {
			return fmt.Errorf("natsjs: create stream %s with %d replicas on file storage: %w (Config.Replicas must not exceed the JetStream servers of the cluster)", c.Stream, c.Replicas, err)
		}
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fmt.Errorf("natsjs: %w: start nats-server with JetStream (-js, or jetstream {} in its config)", err)
	case err != nil:
		return fmt.Errorf("natsjs: look up stream %s: %w", c.Stream, err)
	}
	sc := s.CachedInfo().Config
	if sc.Storage == jetstream.MemoryStorage && !c.AllowMemoryStorage {
		return fmt.Errorf("natsjs: stream %s uses memory storage, which loses every message when the server restarts: recreate it with file storage or set Config.AllowMemoryStorage", c.Stream)
	}
	if sc.Replicas < c.Replicas {
		return fmt.Errorf("natsjs: stream %s has %d replicas but Config.Replicas asks for %d: raise the stream's replicas (nats stream edit %s --replicas %d) or lower Config.Replicas", c.Stream, sc.Replicas, c.Replicas, c.Stream, c.Replicas)
	}
	if !coversAll(sc.Subjects, c.Stream) {
		return fmt.Errorf("natsjs: stream %s has subjects %v, want %q: add the subject to the stream or choose another Config.Stream", c.Stream, sc.Subjects, c.Stream+".>")
	}
	t.useAtomic(s)
	t.maxPayload, t.limitBy = t.nc.MaxPayload(), "the NATS server's max_payload"
	if sc.MaxMsgSize > 0 && int64(sc.MaxMsgSize) < t.maxPayload {
		t.maxPayload, t.limitBy = int64(sc.MaxMsgSize), "the max_msg_size of stream "+c.Stream
	}
	if c.PublishOnly {
		return nil
	}
	if err := t.checkLayout(ctx, s); err != nil {
		return err
	}
	t.parts = make([]jetstream.Consumer, c.Partitions)
	for p := range c.Partitions {
		if t.parts[p], err = t.setupConsumer(ctx, s, p); err != nil {
			return err
		}
	}
	return nil
}

// ConsumerName returns the name of the durable consumer of subject
// partition p: "<Config.Consumer>-p<p>".
func (t *Transport) ConsumerName(p int) string {
	return t.cfg.Consumer + "-p" + strconv.Itoa(p)
}

// checkLayout deletes the consumer of earlier versions, which took every
// subject under Config.Consumer and which a work-queue stream does not
// let overlap with the partition consumers, and refuses a Config.Partitions
// smaller than the partition consumers that exist: the messages on the
// subjects of the others would never be delivered.
func (t *Transport) checkLayout(ctx context.Context, s jetstream.Stream) error {
	c := t.cfg
	_, err := s.Consumer(ctx, c.Consumer)
	switch {
	case err == nil:
		t.log.Warn("deleting the consumer of an earlier version, which took every partition; its messages stay in the stream for the partition consumers", "consumer", c.Consumer, "stream", c.Stream)
		if err := s.DeleteConsumer(ctx, c.Consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("natsjs: delete consumer %s of an earlier version on stream %s: %w", c.Consumer, c.Stream, err)
		}
	case err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound):
		return fmt.Errorf("natsjs: look up consumer %s on stream %s: %w", c.Consumer, c.Stream, err)
	}
	_, err = s.Consumer(ctx, t.ConsumerName(c.Partitions))
	switch {
	case err == nil:
		return fmt.Errorf("natsjs: consumer %s exists on stream %s, so another process runs with more than %d partitions: use the same Config.Partitions on every process (the consumers are %s to %s-pN-1)",
			t.ConsumerName(c.Partitions), c.Stream, c.Partitions, t.ConsumerName(0), c.Consumer)
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return fmt.Errorf("natsjs: look up consumer %s on stream %s: %w", t.ConsumerName(c.Partitions), c.Stream, err)
	}
	return nil
}

// setupConsumer creates or updates the consumer of subject partition p.
func (t *Transport) setupConsumer(ctx context.Context, s jetstream.Stream, p int) (jetstream.Consumer, error) {
	c := t.cfg
	name := t.ConsumerName(p)
	prefix := c.Stream + "." + strconv.Itoa(p) + "."
	cc := jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "Idem engine consumer of partition " + strconv.Itoa(p) + " (transport/natsjs)",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    -1, // the engine dead-letters by Delivery.Attempt
		FilterSubject: prefix + "*",
		MaxAckPending: c.MaxAckPending,
	}
	if len(c.Types) > 0 {
		cc.FilterSubject = ""
		for _, typ := range c.Types {
			cc.FilterSubjects = append(cc.FilterSubjects, prefix+subjectToken(typ))
		}
	}
	// Every Transport of the consumer computes its leases from its own
	// Config.AckWait, so they must all equal the consumer's: an existing
	// consumer keeps its AckWait and a Transport asking for another is
	// refused. Creating (not creating-or-updating) a missing consumer makes
	// two processes that both found none agree too: the second one's
	// create fails if the first one's AckWait differs.
	cons, err := s.Consumer(ctx, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cons, err = s.CreateConsumer(ctx, cc)
		if errors.Is(err, jetstream.ErrConsumerExists) { // created meanwhile, with other settings
			cons, err = s.Consumer(ctx, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: create or look up consumer %s on stream %s: %w", name, c.Stream, err)
	}
	if err := t.checkAckWait(cons); err != nil {
		return nil, err
	}
	cons, err = s.UpdateConsumer(ctx, cc) // the other settings follow Config
	if err != nil {
		return nil, fmt.Errorf("natsjs: update consumer %s on stream %s: %w", name, c.Stream, err)
	}
	return cons, t.checkAckWait(cons)
}

// checkAckWait refuses a consumer whose AckWait is not Config.AckWait.
func (t *Transport) checkAckWait(cons jetstream.Consumer) error {
	c := t.cfg
	ci := cons.CachedInfo()
	if got := ci.Config.AckWait; got != c.AckWait {
		return fmt.Errorf("natsjs: consumer %s of stream %s has AckWait %v but Config.AckWait is %v: every Transport of a consumer must use its AckWait, from which it fences late acks; "+
			"set Config.AckWait to %v, or stop every process of the consumer and change it (nats consumer edit %s %s --wait %v, for each partition's consumer) before starting them with the new value",
			ci.Name, c.Stream, got, c.AckWait, got, c.Stream, ci.Name, c.AckWait)
	}
	return nil
}

func coversAll(subjects []string, stream string) bool {
	for _, s := range subjects {
		if s == stream+".>" || s == ">" {
			return true
		}
	}
	return false
}

// redact hides passwords and tokens in a server URL list.
func redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err == nil && u.User != nil {
			u.User = url.User("redacted")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// Header names on the broker.
const (
	hdrEnvelope = "Idem-Envelope" // the envelope without its body, as JSON
)

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

// Subject returns the subject an envelope is published on. Its partition
// token is the PostgreSQL hashtext of the envelope's canonical
// CorrelationID (Unicode NFC, trimmed; its ID without one) modulo
// Config.Partitions, as pgstore and rabbitmq partition: the NFC and NFD
// forms of a saga key share a subject.
func (t *Transport) Subject(env *transport.Envelope) string {
	part := transport.PartitionOf(transport.PartitionKey(env), t.cfg.Partitions)
	return t.cfg.Stream + "." + strconv.Itoa(part) + "." + subjectToken(env.Type)
}

func subjectToken(s string) string {
	if s == "" {
		return "_"
	}
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

func (t *Transport) isClosed() bool {
	select {
	case <-t.closed:
		return true
	default:
		return false
	}
}

// MaxMessageBytes returns the largest Envelope.Body, in bytes, that
// Publish accepts: the server's max_payload (or the stream's max_msg_size
// when smaller), read by Open, minus HeaderReserve for the headers. Publish
// refuses every envelope with a longer Body, and one whose metadata is so
// large that headers and Body together exceed the limit; both errors wrap
// ErrTooLarge. Set the engine's Config.MaxBodyBytes to at most this.
func (t *Transport) MaxMessageBytes() int {
	return int(t.maxPayload - HeaderReserve)
}

// tooLarge explains an oversize body.
func (t *Transport) tooLarge(env *transport.Envelope) error {
	return fmt.Errorf("natsjs: message %s: body of %d bytes exceeds the %d bytes this transport carries (%s of %d bytes minus %d for headers): raise max_payload on the NATS server, or set the engine's Config.MaxBodyBytes to at most %d: %w",
		env.ID, len(env.Body), t.MaxMessageBytes(), t.limitBy, t.maxPayload, HeaderReserve, t.MaxMessageBytes(), ErrTooLarge)
}

// Publish sends envs and returns once JetStream acknowledged every one of
// them (PubAck), or the first error. Each message carries Nats-Msg-Id =
// transport.PublishID: the envelope ID, so that a copy published again
// within Config.DuplicateWindow is dropped by the stream (its PubAck says
// duplicate, and Publish returns nil); for a deliberate re-publish (a dead
// letter's replay, a "retry now": header transport.HeaderRepublish) the ID
// and a digest of the re-publish's mark, so that the copy is stored and
// delivered, however soon after the first publish, with the envelope's
// ID unchanged. Before sending anything it refuses envs if one of
// them does not fit in a NATS message (see MaxMessageBytes), with an error
// wrapping ErrTooLarge. A slow server makes it wait rather than fail:
// when the window of asynchronous publishes awaiting their answer, which
// every goroutine of t shares, is full, Publish waits for answers (to
// its own messages first) and sends again, keeping the order of envs,
// until ctx ends (its error) or Close (transport.ErrClosed). It returns
// transport.ErrClosed after Close.
func (t *Transport) Publish(ctx context.Context, envs []transport.Envelope) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	msgs := make([]*nats.Msg, len(envs))
	for i := range envs {
		m, err := t.message(&envs[i])
		if err != nil {
			return err
		}
		msgs[i] = m
	}
	if t.batch.on.Load() && len(msgs) >= atomicBatchMin {
		n, err := t.publishBatches(ctx, msgs)
		if err != nil {
			return t.closedOr(err)
		}
		msgs, envs = msgs[n:], envs[n:]
	}
	return t.publishEach(ctx, msgs, envs)
}

// errCodeInProcess is JetStream's JSStreamDuplicateMessageConflict (409):
// on a clustered stream, a message whose ID is a copy's that the stream
// leader has proposed but not yet stored. The server says neither that
// it stored the copy nor that it will.
const errCodeInProcess jetstream.ErrorCode = 10158

// inProcess reports whether err is the server's "duplicate message id is
// in process".
func inProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeInProcess
}

// publishAfterInProcess publishes m again, with its ID, until the server
// answers otherwise than "in process": once the other copy is stored the
// stream drops this one as a duplicate (nil), and if the other copy's
// store failed this one is stored. Each wait doubles, up to half a second;
// ctx and Close bound them.
func (t *Transport) publishAfterInProcess(ctx context.Context, m *nats.Msg, id string) error {
	wait := 5 * time.Millisecond
	for {
		// The other copy's replication, not a synchronisation of ours.
		if err := t.pause(ctx, wait); err != nil {
			return err
		}
		_, err := t.js.PublishMsg(ctx, m, jetstream.WithMsgID(m.Header.Get(jetstream.MsgIDHeader)), jetstream.WithExpectStream(t.cfg.Stream))
		if !inProcess(err) {
			if err != nil {
				return t.closedOr(fmt.Errorf("natsjs: publish %s: %w", id, err))
			}
			return nil
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// pause waits d, or returns ctx's error when ctx ends first, or
// transport.ErrClosed when t is closed first.
func (t *Transport) pause(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.closed:
		return transport.ErrClosed
	}
}

// await waits for the server's answer to an asynchronous publish: nil for
// a PubAck; the error the library reports (a *jetstream.APIError for an
// error answer, nats.ErrDisconnected when the connection dropped), wrapped
// with what; ctx's error; or transport.ErrClosed after Close.
func (t *Transport) await(ctx context.Context, f jetstream.PubAckFuture, what string) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return t.closedOr(fmt.Errorf("natsjs: %s: %w", what, err))
	case <-ctx.Done():
		return ctx.Err()
	case <-t.closed:
		return transport.ErrClosed
	}
}

// message encodes env as the NATS message Publish sends, refusing it with
// an error wrapping ErrTooLarge when it does not fit in one.
func (t *Transport) message(env *transport.Envelope) (*nats.Msg, error) {
	if len(env.Body) > t.MaxMessageBytes() {
		return nil, t.tooLarge(env)
	}
	hdr, err := json.Marshal(meta{ID: env.ID, Type: env.Type, CorrelationID: env.CorrelationID, CausationID: env.CausationID,
		IdempotencyKey: env.IdempotencyKey, Headers: env.Headers, SentAt: env.SentAt})
	if err != nil {
		return nil, fmt.Errorf("natsjs: encode envelope %s: %w", env.ID, err)
	}
	m := nats.NewMsg(t.Subject(env))
	m.Header.Set(hdrEnvelope, string(hdr))
	// Set here as well as by the publish options, to count them.
	m.Header.Set(jetstream.MsgIDHeader, transport.PublishID(env))
	m.Header.Set(jetstream.ExpectedStreamHeader, t.cfg.Stream)
	if size := headerSize(m.Header) + len(env.Body); int64(size) > t.maxPayload {
		return nil, fmt.Errorf("natsjs: message %s: its headers (the envelope's ID, type, keys and headers) take %d bytes, more than the %d that %s leaves beside a body of %d bytes: shorten them or raise max_payload on the NATS server: %w",
			env.ID, size-len(env.Body), t.maxPayload-int64(len(env.Body)), t.limitBy, len(env.Body), ErrTooLarge)
	}
	m.Data = append([]byte(nil), env.Body...)
	return m, nil
}

// headerSize is the size of h as nats.go encodes it, an upper bound (values
// are trimmed when sent).
func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// closedOr returns ErrClosed if the transport was closed, err otherwise.
func (t *Transport) closedOr(err error) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	return err
}

func (t *Transport) handOut(ps []pending) []transport.Delivery {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.handOutLocked(ps)
}

func (t *Transport) handOutLocked(ps []pending) []transport.Delivery {
	now := time.Now()
	if now.Sub(t.pruned) > t.cfg.AckWait {
		// Forget hand-outs long past their lease: settling them
		// returns ErrLeaseLost, as it would anyway.
		for seq, l := range t.leases {
			if now.Sub(l.deadline) > 2*t.cfg.AckWait {
				delete(t.leases, seq)
			}
		}
		t.pruned = now
	}
	ds := make([]transport.Delivery, 0, len(ps))
	for _, p := range ps {
		md, err := p.msg.Metadata()
		if err != nil {
			t.log.Warn("message without JetStream metadata; leaving it to the server", "subject", p.msg.Subject(), "error", err)
			continue
		}
		seq, dc := md.Sequence.Stream, md.NumDelivered
		t.leases[seq] = &lease{dc: dc, msg: p.msg, deadline: p.start.Add(t.cfg.AckWait)}
		ds = append(ds, transport.Delivery{
			Envelope: decode(p.msg, seq),
			Attempt:  int(dc),
			Token:    strconv.FormatUint(seq, 10) + "." + strconv.FormatUint(dc, 10),
		})
	}
	return ds
}

// decode rebuilds the envelope. A message published by something other
// than this package keeps what it has (Nats-Msg-Id as ID, no type), so
// that the engine dead-letters it with a reason.
func decode(m jetstream.Msg, seq uint64) transport.Envelope {
	var md meta
	h := m.Headers()
	if raw := h.Get(hdrEnvelope); raw != "" {
		_ = json.Unmarshal([]byte(raw), &md)
	}
	if md.ID == "" {
		md.ID = h.Get(jetstream.MsgIDHeader)
	}
	if md.ID == "" {
		md.ID = "nats-seq-" + strconv.FormatUint(seq, 10)
	}
	var body []byte
	if len(m.Data()) > 0 {
		body = append([]byte(nil), m.Data()...)
	}
	return transport.Envelope{ID: md.ID, Type: md.Type, CorrelationID: md.CorrelationID, CausationID: md.CausationID,
		IdempotencyKey: md.IdempotencyKey, Headers: md.Headers, SentAt: md.SentAt, Body: body}
}

// claimSeq checks that d may be settled and marks it settled. It returns the
// message to settle, nil for a delivery settled before, or an error
// wrapping transport.ErrLeaseLost.
func (t *Transport) claimSeq(d transport.Delivery) (jetstream.Msg, uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, seq, err := t.fenceLocked("settle message", d)
	if err != nil || l == nil {
		return nil, 0, err
	}
	l.settled = true
	return l.msg, seq, nil
}

// fenceLocked returns the lease of d, under the client-side fence, and
// its stream sequence: nil for a delivery settled before, or an error
// wrapping transport.ErrLeaseLost when d was handed out again since, was
// never handed out here or forgotten, or its lease is (nearly) expired.
// t.mu is held. Settling and extending share it.
func (t *Transport) fenceLocked(op string, d transport.Delivery) (*lease, uint64, error) {
	seq, dc, err := parseToken(d)
	if err != nil {
		return nil, 0, err
	}
	l := t.leases[seq]
	switch {
	case l == nil || l.dc < dc:
		return nil, 0, fmt.Errorf("natsjs: %s %s (stream sequence %d, delivery %d): not handed out by this transport or forgotten after its lease: %w", op, d.Envelope.ID, seq, dc, transport.ErrLeaseLost)
	case l.dc > dc:
		return nil, 0, fmt.Errorf("natsjs: %s %s (stream sequence %d, delivery %d): handed out again as delivery %d: %w", op, d.Envelope.ID, seq, dc, l.dc, transport.ErrLeaseLost)
	case l.settled:
		return nil, 0, nil
	case !time.Now().Before(l.deadline.Add(-t.margin)):
		return nil, 0, fmt.Errorf("natsjs: %s %s (stream sequence %d, delivery %d): lease of %v expired or about to: %w", op, d.Envelope.ID, seq, dc, t.cfg.AckWait, transport.ErrLeaseLost)
	}
	return l, seq, nil
}

// parseToken splits d's token into the stream sequence and the delivery
// count.
func parseToken(d transport.Delivery) (seq, dc uint64, err error) {
	seqS, dcS, ok := strings.Cut(d.Token, ".")
	seq, err1 := strconv.ParseUint(seqS, 10, 64)
	dc, err2 := strconv.ParseUint(dcS, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("natsjs: message %s: token %q was not made by this package", d.Envelope.ID, d.Token)
	}
	return seq, dc, nil
}

// unclaim undoes claimSeq when sending the settlement failed.
func (t *Transport) unclaim(seq uint64, m jetstream.Msg) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.leases[seq]; l != nil && l.msg == m {
		l.settled = false
	}
}

// Ack settles ds as done: it sends an ack for each delivery whose lease is
// alive and waits until the server has received them. A delivery handed out
// again since, or whose lease is (nearly) expired, is not acked and its
// error wraps transport.ErrLeaseLost; settling a settled delivery again
// does nothing. Errors of several deliveries are joined.
func (t *Transport) Ack(ctx context.Context, ds []transport.Delivery) error {
	if t.cfg.PublishOnly {
		return ErrPublishOnly
	}
	if t.isClosed() {
		return transport.ErrClosed
	}
	return t.sendEach(ctx, "acks", ds, func(d transport.Delivery) (bool, error) {
		m, seq, err := t.claimSeq(d)
		if err != nil || m == nil {
			return false, err
		}
		if err := m.Ack(); err != nil {
			t.unclaim(seq, m)
			return false, t.closedOr(fmt.Errorf("natsjs: ack %s: %w", d.Envelope.ID, err))
		}
		return true, nil
	})
}

// sendEach calls send for each delivery of ds, which sends an
// acknowledgement (what) of it and reports whether it did, then waits
// until the server has received them. The errors of several deliveries
// are joined. Ack and ExtendLeases share it.
func (t *Transport) sendEach(ctx context.Context, what string, ds []transport.Delivery, send func(transport.Delivery) (bool, error)) error {
	var errs []error
	sent := false
	for _, d := range ds {
		ok, err := send(d)
		if err != nil {
			errs = append(errs, err)
		}
		sent = sent || ok
	}
	if sent {
		if err := t.flush(ctx); err != nil {
			errs = append(errs, t.closedOr(fmt.Errorf("natsjs: flush %s: %w", what, err)))
		}
	}
	return errors.Join(errs...)
}

// Nack returns d for redelivery after delay (NakWithDelay; at once for a
// delay of zero or less). The fence and the errors are Ack's.
func (t *Transport) Nack(ctx context.Context, d transport.Delivery, delay time.Duration) error {
	if t.cfg.PublishOnly {
		return ErrPublishOnly
	}
	if t.isClosed() {
		return transport.ErrClosed
	}
	m, seq, err := t.claimSeq(d)
	if err != nil || m == nil {
		return err
	}
	if delay > 0 {
		err = m.NakWithDelay(delay)
	} else {
		err = m.Nak()
	}
	if err != nil {
		t.unclaim(seq, m)
		return t.closedOr(fmt.Errorf("natsjs: nak %s: %w", d.Envelope.ID, err))
	}
	if err := t.flush(ctx); err != nil {
		return t.closedOr(fmt.Errorf("natsjs: flush nak: %w", err))
	}
	return nil
}

// flush waits until the server has received what was sent, for at most
// AckWait when ctx has no deadline.
func (t *Transport) flush(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.cfg.AckWait)
		defer cancel()
	}
	return t.nc.FlushWithContext(ctx)
}

// Pending reports the consumer's messages not yet delivered (ready) and
// delivered but not acknowledged (unacked), across every process of the
// namespace (transport.PendingCounter). JetStream counts a message whose
// AckWait expired, or that was nacked, as unacked until it is delivered
// again. It returns transport.ErrClosed after Close and ErrPublishOnly on a
// publish-only Transport.
func (t *Transport) Pending(ctx context.Context) (ready, unacked int, err error) {
	if t.cfg.PublishOnly {
		return 0, 0, ErrPublishOnly
	}
	if t.isClosed() {
		return 0, 0, transport.ErrClosed
	}
	for _, cons := range t.parts {
		ci, err := cons.Info(ctx)
		if err != nil {
			return 0, 0, fmt.Errorf("natsjs: consumer info: %w", err)
		}
		ready += int(ci.NumPending)
		unacked += ci.NumAckPending
	}
	return ready, unacked, nil
}

// Close returns the messages it holds for a later Receive (brought by pull
// requests that a Receive gave up on) to the server with a Nak, so that
// they are redelivered at once rather than after AckWait, flushes
// outstanding acks and closes the connection; afterwards every method
// returns transport.ErrClosed. Deliveries already handed out and not
// settled are left to AckWait. Close is idempotent.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		close(t.closed)
		t.mu.Lock()
		var held []pending
		for p, left := range t.leftovers {
			held = append(held, left...)
			t.leftovers[p] = nil
		}
		t.mu.Unlock()
		t.release(held)
		_ = t.nc.FlushTimeout(time.Second)
		t.nc.Close()
	})
	return nil
}

// release naks the messages of ps whose lease is still alive; a message
// past it may have been handed to another consumer already, whose
// delivery a Nak would settle.
func (t *Transport) release(ps []pending) {
	now := time.Now()
	for _, p := range ps {
		if now.Before(p.start.Add(t.cfg.AckWait - t.margin)) {
			_ = p.msg.Nak() // best effort: without it the message comes back after AckWait
		}
	}
}

// DeleteStream deletes the stream of this Transport's namespace with every
// message in it, for tests and benchmarks that make throwaway namespaces.
func (t *Transport) DeleteStream(ctx context.Context) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	if err := t.js.DeleteStream(ctx, t.cfg.Stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("natsjs: delete stream %s: %w", t.cfg.Stream, err)
	}
	return nil
}

package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemhq/idem/transport"
)

// Config configures a Transport. The zero value means the defaults given in
// each field's comment.
type Config struct {
	// Namespace prefixes every exchange and queue the transport declares
	// (see the package documentation). Replicas of one application share
	// it; different applications on one virtual host use different ones.
	// Default "idem".
	Namespace string
	// Partitions is how many partition queues carry the messages; a saga
	// key always goes to the same one, and each has a single active
	// consumer. Every replica must use the same value: Open refuses a
	// smaller one than the queues that exist. Default 16.
	Partitions int
	// Prefetch is how many unacknowledged deliveries the broker sends per
	// partition queue ahead of Receive (basic.qos). Size it to the
	// engine's batch (idem.Config.BatchSize, default 64). Default 128.
	Prefetch int
	// Lease is how long a delivery handed out by Receive may stay unsettled
	// before the transport requeues it itself and fences the late Ack or
	// Nack with transport.ErrLeaseLost. Keep it below the broker's
	// consumer_timeout (30 minutes by default), which closes the whole
	// channel instead. Default 1m.
	Lease time.Duration
	// ReconnectMin and ReconnectMax bound the exponential backoff (with
	// jitter) between reconnection attempts after the connection is lost.
	// Defaults 100ms and 15s.
	ReconnectMin, ReconnectMax time.Duration
	// Heartbeat is the AMQP heartbeat interval. Default 10s.
	Heartbeat time.Duration
	// MaxMessageSize is the broker's max_message_size in bytes: the
	// largest AMQP message body it accepts. A client cannot read it, so
	// set it to the broker's value. RabbitMQ closes the channel of a
	// publish above it, which would fence every delivery of the
	// connection; Publish therefore refuses such a message itself, with
	// an error wrapping transport.ErrTooLarge (see MaxMessageBytes).
	// Default DefaultMaxMessageSize (16 MiB, RabbitMQ 4's default; 3.x's
	// is 128 MiB); at most 512 MiB, above EnvelopeReserve.
	MaxMessageSize int
	// Logger receives connection losses and reconnections. Nil means
	// slog.Default().
	Logger *slog.Logger
	// ConnectionName is shown in the broker's connection list. Default
	// "idem".
	ConnectionName string
}

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Namespace == "" {
		out.Namespace = "idem"
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if out.Partitions == 0 {
		out.Partitions = 16
	}
	if out.Prefetch == 0 {
		out.Prefetch = 128
	}
	def(&out.Lease, time.Minute)
	def(&out.ReconnectMin, 100*time.Millisecond)
	def(&out.ReconnectMax, 15*time.Second)
	def(&out.Heartbeat, 10*time.Second)
	if out.MaxMessageSize == 0 {
		out.MaxMessageSize = DefaultMaxMessageSize
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.ConnectionName == "" {
		out.ConnectionName = "idem"
	}
	switch {
	case out.Partitions < 1 || out.Partitions > 1024:
		return out, fmt.Errorf("rabbitmq: Config.Partitions is %d: use 1 to 1024", out.Partitions)
	case out.Prefetch < 1 || out.Prefetch > 65535:
		return out, fmt.Errorf("rabbitmq: Config.Prefetch is %d: use 1 to 65535", out.Prefetch)
	case out.Lease < 0 || out.ReconnectMin < 0 || out.ReconnectMax < out.ReconnectMin || out.Heartbeat < 0:
		return out, errors.New("rabbitmq: Config durations must be positive, with ReconnectMax at least ReconnectMin")
	case out.MaxMessageSize <= EnvelopeReserve || out.MaxMessageSize > 512<<20:
		return out, fmt.Errorf("rabbitmq: Config.MaxMessageSize is %d: use the broker's max_message_size, above %d (EnvelopeReserve) and at most 512 MiB", out.MaxMessageSize, EnvelopeReserve)
	}
	return out, nil
}

// Transport is a transport.Transport, transport.PartitionedConsumer,
// transport.PendingCounter and transport.SizeLimiter on RabbitMQ. It is
// safe for concurrent use.
type Transport struct {
	urls  []string // as given, with passwords: never logged
	safes []string // redacted, for messages
	safe  string   // all of them, redacted
	next  atomic.Int64
	cfg   Config
	log   *slog.Logger
	gens  atomic.Uint64
	pubs  atomic.Uint64

	mu      sync.Mutex
	sess    *session      // nil while reconnecting
	changed chan struct{} // closed (and replaced) when sess changes
	parts   [][]*inbound  // received from the broker, not yet handed out
	arrived chan struct{} // closed (and replaced) when parts grows
	rr      int           // partition Receive starts at, for fairness
	pending map[string]*inbound
	lost    map[string]time.Time
	closed  bool
	// consuming is set by the first Receive, which also closes
	// startConsuming; sessions then consume. Only run starts consumers,
	// so that every goroutine of the transport is started by one that
	// Close waits for.
	consuming      bool
	startConsuming chan struct{}
	done           chan struct{}
	wg             sync.WaitGroup

	// consumeHook, set by tests before the first Receive, runs before the
	// consumer of each partition queue is started.
	consumeHook func(part int)
}

// inbound is one delivery from the broker.
type inbound struct {
	d    transport.Delivery
	hash uint32
	sess *session
	ch   *amqp.Channel
	tag  uint64
	out  time.Time // when Receive handed it out
}

var (
	_ transport.Transport           = (*Transport)(nil)
	_ transport.PartitionedConsumer = (*Transport)(nil)
	_ transport.PendingCounter      = (*Transport)(nil)
	_ transport.SizeLimiter         = (*Transport)(nil)
)

// Open connects to the broker at url (amqp:// or amqps://; several URLs of
// one cluster's nodes may be given separated by commas, tried in turn on
// every connection attempt), declares the
// namespace's exchanges and queues, and starts consuming. It does not retry:
// an unreachable broker, refused credentials or permissions, and queues
// that exist with other settings are returned as errors that say what to
// change. After Open, a lost connection is re-established in the
// background with backoff. Close the transport when done.
func Open(ctx context.Context, url string, cfg *Config) (*Transport, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	urls, safes, err := parseURLs(url)
	if err != nil {
		return nil, err
	}
	t := &Transport{
		urls:    urls,
		safes:   safes,
		safe:    strings.Join(safes, ","),
		cfg:     c,
		log:     c.Logger.With("component", "idem.rabbitmq", "transport", "rabbitmq", "namespace", c.Namespace),
		changed: make(chan struct{}),
		parts:   make([][]*inbound, c.Partitions),
		arrived: make(chan struct{}),
		pending: map[string]*inbound{},
		lost:    map[string]time.Time{},
		done:    make(chan struct{}),

		startConsuming: make(chan struct{}),
	}
	if err := t.checkPartitions(ctx); err != nil {
		return nil, err
	}
	s, err := t.connect(ctx)
	if err != nil {
		return nil, err
	}
	t.wg.Add(2)
	go t.run(s)
	go t.reap()
	return t, nil
}

// parseURLs splits a comma-separated list of AMQP URLs, with their
// redacted forms for messages.
func parseURLs(url string) (urls, safes []string, err error) {
	for _, u := range strings.Split(url, ",") {
		u = strings.TrimSpace(u)
		if _, err := amqp.ParseURI(u); err != nil {
			return nil, nil, fmt.Errorf("rabbitmq: the URL %s is not a valid AMQP URI (amqp://user:password@host:5672/vhost): %w", redact(u), err)
		}
		urls, safes = append(urls, u), append(safes, redact(u))
	}
	return urls, safes, nil
}

// redact hides the password of an AMQP URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// Names of what the transport declares.
func (t *Transport) exchange() string      { return t.cfg.Namespace }
func (t *Transport) delayExchange() string { return t.cfg.Namespace + ".delay" }
func (t *Transport) deadExchange() string  { return t.cfg.Namespace + ".dlx" }
func (t *Transport) deadQueue() string     { return t.cfg.Namespace + ".dead" }
func (t *Transport) queue(part int) string { return t.cfg.Namespace + ".p" + strconv.Itoa(part) }
func (t *Transport) delayQueue(ms int64) string {
	return t.cfg.Namespace + ".delay." + strconv.FormatInt(ms, 10)
}

// Queues returns the names of the partition queues, the queues that hold
// messages waiting for a consumer.
func (t *Transport) Queues() []string {
	qs := make([]string, t.cfg.Partitions)
	for i := range qs {
		qs[i] = t.queue(i)
	}
	return qs
}

// session is one connection with its channels. It dies as a whole: when
// the connection or any of its channels closes, every delivery it carried
// is requeued by the broker and fenced here.
type session struct {
	gen     uint64
	conn    *amqp.Connection
	pubMu   sync.Mutex // one publish batch at a time on pub
	pub     *amqp.Channel
	returns chan amqp.Return
	delays  map[int64]bool // delay queues declared, under pubMu

	consumeOnce sync.Once
	consumeErr  error
	dead        chan struct{}
	once        sync.Once
}

func (s *session) kill() {
	s.once.Do(func() {
		close(s.dead)
		go func() { _ = s.conn.Close() }()
	})
}

func (s *session) isDead() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

// watch kills s when c reports a close.
func (s *session) watch(c chan *amqp.Error) {
	go func() {
		<-c
		s.kill()
	}()
}

// dial opens a connection to the first URL that answers, starting from the
// one that answered last.
func (t *Transport) dial(ctx context.Context) (*amqp.Connection, error) {
	var errs []error
	start := int(t.next.Load())
	for i := range t.urls {
		n := (start + i) % len(t.urls)
		conn, err := t.dialOne(ctx, t.urls[n], t.safes[n])
		if err == nil {
			t.next.Store(int64(n))
			return conn, nil
		}
		if !errors.Is(err, errUnreachable) {
			return nil, err // refused: another node would refuse the same
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// errUnreachable marks a connection attempt that reached no broker.
var errUnreachable = errors.New("broker unreachable")

// dialOne opens a connection, turning failures into advice.
func (t *Transport) dialOne(ctx context.Context, raw, safe string) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(t.cfg.ConnectionName)
	d := &net.Dialer{Timeout: 10 * time.Second}
	conn, err := amqp.DialConfig(raw, amqp.Config{
		Heartbeat:  t.cfg.Heartbeat,
		Locale:     "en_US",
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Bound the handshake as amqp.DefaultDial does.
			return c, c.SetDeadline(time.Now().Add(30 * time.Second))
		},
	})
	if err == nil {
		return conn, nil
	}
	var ae *amqp.Error
	switch {
	case errors.Is(err, amqp.ErrCredentials) || errors.As(err, &ae) && ae.Code == amqp.AccessRefused:
		return nil, fmt.Errorf("rabbitmq: the broker at %s refused the user name or password: check the credentials in the URL (the guest user may only connect from localhost): %w", safe, err)
	case errors.As(err, &ae) && ae.Code == amqp.NotAllowed:
		return nil, fmt.Errorf("rabbitmq: the broker at %s refused the virtual host: create it or give the user access to it (rabbitmqctl add_vhost, set_permissions -p): %w", safe, err)
	case errors.Is(err, amqp.ErrSASL) || errors.Is(err, amqp.ErrVhost):
		return nil, fmt.Errorf("rabbitmq: the broker at %s refused the connection: check the URL's credentials and virtual host: %w", safe, err)
	default:
		return nil, fmt.Errorf("rabbitmq: cannot reach the broker at %s: check the host and port in the URL and that RabbitMQ is running and listening there: %w: %w", safe, errUnreachable, err)
	}
}

// explain turns a channel error during declaration into advice.
func (t *Transport) explain(what string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.AccessRefused:
			return fmt.Errorf("rabbitmq: declaring %s: the user lacks permissions: grant configure, write and read on the names starting with %q (rabbitmqctl set_permissions -p <vhost> <user> '^%s\\.?.*' '^%s\\.?.*' '^%s\\.?.*'): %w",
				what, t.cfg.Namespace, t.cfg.Namespace, t.cfg.Namespace, t.cfg.Namespace, err)
		case amqp.PreconditionFailed:
			return fmt.Errorf("rabbitmq: %s already exists with other settings (%s): Idem needs durable quorum queues with single active consumer and at-least-once dead-lettering; drain and delete it, or choose another Config.Namespace: %w", what, ae.Reason, err)
		}
	}
	return fmt.Errorf("rabbitmq: declaring %s: %w", what, err)
}

// checkPartitions refuses a partition count smaller than the partition
// queues that exist: messages routed to the queues beyond it would wait
// for a replica configured otherwise.
func (t *Transport) checkPartitions(ctx context.Context) error {
	conn, err := t.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	n := t.cfg.Partitions
	more, err := t.queueExists(conn, t.queue(n))
	if err != nil {
		return err
	}
	if more {
		return fmt.Errorf("rabbitmq: queue %s exists, so another replica runs with more than %d partitions: use the same Config.Partitions on every replica (the queues are %s.p0 to %s.pN-1)",
			t.queue(n), n, t.cfg.Namespace, t.cfg.Namespace)
	}
	// An existing namespace must have every partition queue: a replica
	// (or a tool) with more partitions than the consumers would publish to
	// queues nobody reads.
	first, err := t.queueExists(conn, t.queue(0))
	if err != nil || !first || n == 1 {
		return err
	}
	last, err := t.queueExists(conn, t.queue(n-1))
	if err != nil {
		return err
	}
	if !last {
		return fmt.Errorf("rabbitmq: queue %s does not exist but %s does, so the namespace was created with fewer than %d partitions: use the same Config.Partitions on every replica and tool",
			t.queue(n-1), t.queue(0), n)
	}
	return nil
}

// queueExists declares q passively, on a channel of its own (a passive
// declare of a missing queue closes its channel with 404).
func (t *Transport) queueExists(conn *amqp.Connection, q string) (bool, error) {
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("rabbitmq: opening a channel: %w", err)
	}
	_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
	var ae *amqp.Error
	switch {
	case err == nil:
		_ = ch.Close()
		return true, nil
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return false, nil
	default:
		return false, t.explain("queue "+q, err)
	}
}

var quorumArgs = amqp.Table{
	amqp.QueueTypeArg: amqp.QueueTypeQuorum,
	// At-least-once dead-lettering (RabbitMQ 3.10+) needs reject-publish.
	"x-dead-letter-strategy": "at-least-once",
	amqp.QueueOverflowArg:    amqp.QueueOverflowRejectPublish,
}

func withArgs(base amqp.Table, kv ...any) amqp.Table {
	out := amqp.Table{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

// declare declares the namespace's topology; it is idempotent.
func (t *Transport) declare(ch *amqp.Channel) error {
	ns := t.cfg.Namespace
	for _, x := range []struct{ name, kind string }{
		{t.exchange(), amqp.ExchangeTopic},
		{t.delayExchange(), amqp.ExchangeTopic},
		{t.deadExchange(), amqp.ExchangeFanout},
	} {
		if err := ch.ExchangeDeclare(x.name, x.kind, true, false, false, false, nil); err != nil {
			return t.explain("exchange "+x.name, err)
		}
	}
	if _, err := ch.QueueDeclare(t.deadQueue(), true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		return t.explain("queue "+t.deadQueue(), err)
	}
	if err := ch.QueueBind(t.deadQueue(), "", t.deadExchange(), false, nil); err != nil {
		return t.explain("binding of "+t.deadQueue(), err)
	}
	args := withArgs(quorumArgs, amqp.SingleActiveConsumerArg, true, "x-dead-letter-exchange", ns+".dlx")
	for i := range t.cfg.Partitions {
		q := t.queue(i)
		if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
			return t.explain("queue "+q, err)
		}
		// Published with key p<i>; back from a delay queue with d<ms>.p<i>.
		for _, key := range []string{"p" + strconv.Itoa(i), "*.p" + strconv.Itoa(i)} {
			if err := ch.QueueBind(q, key, t.exchange(), false, nil); err != nil {
				return t.explain("binding of "+q, err)
			}
		}
	}
	return nil
}

// declareDelay declares the delay queue for one bucket: messages wait there
// ms milliseconds (one TTL for the whole queue, so they expire in order at
// its head) and are dead-lettered back to the namespace's exchange with
// their routing key d<ms>.p<part>, which leads to their partition queue.
func (t *Transport) declareDelay(ch *amqp.Channel, ms int64) error {
	q := t.delayQueue(ms)
	args := withArgs(quorumArgs, "x-message-ttl", ms, "x-dead-letter-exchange", t.exchange())
	if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
		return t.explain("queue "+q, err)
	}
	if err := ch.QueueBind(q, "d"+strconv.FormatInt(ms, 10)+".*", t.delayExchange(), false, nil); err != nil {
		return t.explain("binding of "+q, err)
	}
	return nil
}

// connect opens a session: connection, topology, a confirming publisher
// channel, and one consuming channel per partition queue.
func (t *Transport) connect(ctx context.Context) (*session, error) {
	conn, err := t.dial(ctx)
	if err != nil {
		return nil, err
	}
	s := &session{gen: t.gens.Add(1), conn: conn, dead: make(chan struct{}), delays: map[int64]bool{}}
	fail := func(err error) (*session, error) {
		s.kill()
		return nil, err
	}
	s.watch(conn.NotifyClose(make(chan *amqp.Error, 1)))
	ch, err := conn.Channel()
	if err != nil {
		return fail(fmt.Errorf("rabbitmq: opening a channel: %w", err))
	}
	if err := t.declare(ch); err != nil {
		return fail(err)
	}
	_ = ch.Close()

	if s.pub, err = conn.Channel(); err != nil {
		return fail(fmt.Errorf("rabbitmq: opening the publishing channel: %w", err))
	}
	if err := s.pub.Confirm(false); err != nil {
		return fail(fmt.Errorf("rabbitmq: enabling publisher confirms: %w", err))
	}
	s.returns = s.pub.NotifyReturn(make(chan amqp.Return, 64))
	s.watch(s.pub.NotifyClose(make(chan *amqp.Error, 1)))
	if !t.install(s) {
		return fail(transport.ErrClosed)
	}
	t.mu.Lock()
	consuming := t.consuming
	t.mu.Unlock()
	if consuming {
		if err := t.consume(s); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

// consume registers a consumer on every partition queue of session s,
// once. Consumers start with the first Receive, not at Open: under single
// active consumer, a process that only publishes must not hold the
// partitions (and prefetch their messages) without ever receiving them.
// Only run calls it (directly or through connect): the forwarding
// goroutines it starts are then added to t.wg while run is counted in it,
// never concurrently with Close's t.wg.Wait.
func (t *Transport) consume(s *session) error {
	s.consumeOnce.Do(func() {
		for i := range t.cfg.Partitions {
			ch, err := s.conn.Channel()
			if err == nil {
				err = ch.Qos(t.cfg.Prefetch, 0, false)
			}
			var dl <-chan amqp.Delivery
			if err == nil {
				s.watch(ch.NotifyClose(make(chan *amqp.Error, 1)))
				dl, err = ch.Consume(t.queue(i), "", false, false, false, false, nil)
			}
			if err != nil {
				s.consumeErr = t.explain("a consumer on "+t.queue(i), err)
				s.kill()
				return
			}
			if t.consumeHook != nil {
				t.consumeHook(i)
			}
			t.wg.Add(1)
			go t.forward(s, i, ch, dl)
		}
	})
	return s.consumeErr
}

// install makes s the current session, unless the transport is closed.
func (t *Transport) install(s *session) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.sess = s
	close(t.changed)
	t.changed = make(chan struct{})
	return true
}

// drop forgets a dead session: what it buffered is gone (the broker
// requeued it) and what it handed out is fenced.
func (t *Transport) drop(s *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sess == s {
		t.sess = nil
		close(t.changed)
		t.changed = make(chan struct{})
	}
	for i, buf := range t.parts {
		kept := buf[:0]
		for _, in := range buf {
			if in.sess != s {
				kept = append(kept, in)
			}
		}
		clear(buf[len(kept):])
		t.parts[i] = kept
	}
	now := time.Now()
	for tok, in := range t.pending {
		if in.sess == s {
			delete(t.pending, tok)
			t.lost[tok] = now
		}
	}
}

// run starts the consumers when the first Receive asks for them, and
// re-establishes the session whenever it dies, until Close.
func (t *Transport) run(s *session) {
	defer t.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-t.done
		cancel()
	}()
	start := t.startConsuming
	for {
		select {
		case <-start:
			// A session connected after the first Receive consumes
			// already; consume does nothing then.
			start = nil
			if err := t.consume(s); err != nil {
				t.log.Warn("rabbitmq: starting consumers failed; reconnecting", "error", err)
			}
			continue
		case <-s.dead:
		case <-t.done:
			return
		}
		t.drop(s)
		t.log.Warn("rabbitmq connection lost; reconnecting", "broker", t.safe)
		backoff := t.cfg.ReconnectMin
		for attempt := 1; ; attempt++ {
			wait := backoff/2 + rand.N(backoff/2+1)
			select {
			case <-time.After(wait):
			case <-t.done:
				return
			}
			ns, err := t.connect(ctx)
			if err == nil {
				s = ns
				t.log.Info("rabbitmq reconnected", "broker", t.safe, "attempts", attempt)
				break
			}
			if errors.Is(err, transport.ErrClosed) {
				return
			}
			backoff = min(2*backoff, t.cfg.ReconnectMax)
			t.log.Warn("rabbitmq reconnection failed", "error", err, "attempt", attempt, "retry_within", backoff)
		}
	}
}

// current waits for a live session.
func (t *Transport) current(ctx context.Context) (*session, error) {
	for {
		t.mu.Lock()
		closed, s, changed := t.closed, t.sess, t.changed
		t.mu.Unlock()
		if closed {
			return nil, transport.ErrClosed
		}
		if s != nil && !s.isDead() {
			return s, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var dead <-chan struct{}
		if s != nil {
			dead = s.dead
		}
		select {
		case <-changed:
		case <-dead:
			// Dead but not yet dropped: wait for run to replace it.
			select {
			case <-changed:
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-t.done:
				return nil, transport.ErrClosed
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.done:
			return nil, transport.ErrClosed
		}
	}
}

// Close closes the connection; the broker requeues every unsettled
// delivery. After Close every method returns transport.ErrClosed.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.done)
	s := t.sess
	t.sess = nil
	t.mu.Unlock()
	if s != nil {
		s.kill()
	}
	t.wg.Wait()
	return nil
}

package redisstreams

import (
	"context"
	"crypto/rand"
	_ "embed" // the Lua scripts
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/internal/backoff"
	"github.com/idemhq/idem/transport"
)

// Config configures a Transport. The zero value means the defaults given in
// each field's comment.
type Config struct {
	// Namespace names the application's streams: every key the transport
	// uses starts with "{Namespace}:" (one Redis Cluster hash slot).
	// Replicas of one application share it; different applications on one
	// server use different ones. Letters, digits, '_', '-' and '.'.
	// Default "idem".
	Namespace string
	// Partitions is how many streams carry the messages; a saga key always
	// goes to the same one. Every replica and tool must use the same value:
	// Open refuses another one than the namespace was created with. Use a
	// multiple of the engine's idem.Config.Consumers, so that each
	// consumer reads its own streams. Default 16, at most 1024.
	Partitions int
	// Lease is how long a delivery handed out by Receive may stay unsettled
	// before another Receive (of any process) reclaims it with XAUTOCLAIM;
	// the late Ack or Nack of the first holder then returns an error
	// wrapping transport.ErrLeaseLost. Measured by the Redis server's
	// clock. Default 1m.
	Lease time.Duration
	// PollInterval is the longest a blocked Receive waits before it looks
	// again for deliveries whose lease expired; new entries, nacks and
	// delays that fall due wake it sooner. Default 1s.
	PollInterval time.Duration
	// MaxMessageBytes is the largest Envelope.Body Publish accepts; a
	// larger one is refused with an error wrapping transport.ErrTooLarge.
	// Open lowers it to what the server's proto-max-bulk-len allows.
	// Default 8 MiB.
	MaxMessageBytes int
	// ReconnectMin and ReconnectMax bound the exponential backoff (with
	// jitter) between attempts while the server cannot be reached.
	// Defaults 100ms and 5s.
	ReconnectMin, ReconnectMax time.Duration

	// AllowLossOnCrash starts the transport on a server that may lose
	// acknowledged writes in a crash: one without appendonly yes and
	// appendfsync always, or whose settings cannot be read (CONFIG GET
	// refused). Published messages and acknowledgements may then be lost
	// or undone. Default false: Open refuses such a server.
	AllowLossOnCrash bool
	// AllowEviction starts the transport on a server whose
	// maxmemory-policy evicts keys without a TTL (allkeys-*): under memory
	// pressure it may delete a whole stream of unprocessed messages.
	// Default false: Open refuses such a server.
	AllowEviction bool
	// AllowUnauthenticated connects without a password to a server on an
	// address other than loopback (or a Unix socket), where anyone who can
	// reach it can read, change or delete the messages. Default false:
	// Open refuses such a URL before connecting.
	AllowUnauthenticated bool

	// Logger receives connection losses and recoveries and undecodable
	// entries. Nil means slog.Default().
	Logger *slog.Logger
	// ClientName is shown in the server's CLIENT LIST. Default "idem".
	ClientName string
}

var namespaceRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}$`)

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Namespace == "" {
		out.Namespace = "idem"
	}
	if out.Partitions == 0 {
		out.Partitions = 16
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&out.Lease, time.Minute)
	def(&out.PollInterval, time.Second)
	def(&out.ReconnectMin, 100*time.Millisecond)
	def(&out.ReconnectMax, 5*time.Second)
	if out.MaxMessageBytes == 0 {
		out.MaxMessageBytes = 8 << 20
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.ClientName == "" {
		out.ClientName = "idem"
	}
	switch {
	case !namespaceRE.MatchString(out.Namespace):
		return out, fmt.Errorf("redisstreams: Config.Namespace %q: use 1 to 100 letters, digits, '_', '-' or '.'", out.Namespace)
	case out.Partitions < 1 || out.Partitions > 1024:
		return out, fmt.Errorf("redisstreams: Config.Partitions is %d: use 1 to 1024", out.Partitions)
	case out.MaxMessageBytes < 0:
		return out, fmt.Errorf("redisstreams: Config.MaxMessageBytes is %d: use a positive size", out.MaxMessageBytes)
	case out.Lease < time.Millisecond:
		return out, fmt.Errorf("redisstreams: Config.Lease is %v: use at least 1ms", out.Lease)
	case out.PollInterval < time.Millisecond:
		return out, fmt.Errorf("redisstreams: Config.PollInterval is %v: use at least 1ms", out.PollInterval)
	case out.ReconnectMin <= 0 || out.ReconnectMax < out.ReconnectMin:
		return out, errors.New("redisstreams: Config.ReconnectMin and ReconnectMax must be positive, with ReconnectMax at least ReconnectMin")
	}
	return out, nil
}

// group is the consumer group every Transport of a namespace reads
// through: together they consume each message once.
const group = "idem"

// The Lua scripts; each comment says what it does and why it is atomic.
var (
	//go:embed lua/receive.lua
	receiveLua    string
	receiveScript = redis.NewScript(receiveLua)
	//go:embed lua/settle.lua
	settleLua    string
	settleScript = redis.NewScript(settleLua)
	//go:embed lua/pending.lua
	pendingLua    string
	pendingScript = redis.NewScript(pendingLua)
	//go:embed lua/forget.lua
	forgetLua    string
	forgetScript = redis.NewScript(forgetLua)
)

// Transport is a transport.Transport, transport.PartitionedConsumer,
// transport.SizeLimiter and transport.PendingCounter on Redis Streams. It
// is safe for concurrent use.
type Transport struct {
	rdb      *redis.Client
	cfg      Config
	log      *slog.Logger
	safe     string // the URL without its password, for messages
	consumer string // this Transport's consumer name in the group
	maxBytes int
	retry    backoff.Policy

	streams, delays []string // per partition
	wake, meta      string

	life   context.Context // ends at Close
	cancel context.CancelFunc
	done   chan struct{}
	wg     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	consuming bool        // the consumer janitor runs
	cursors   []string    // XAUTOCLAIM cursor per partition
	reclaimed []time.Time // last XAUTOCLAIM per partition
	buf       []held      // read for another partition of ReceivePartition
	arrived   chan struct{}
	down      bool          // a lost connection was logged and not yet its recovery
	rr        atomic.Uint64 // rotates the partition Receive starts at
}

// held is a delivery read for another consumer of ReceivePartition.
type held struct {
	d    transport.Delivery
	hash uint32
	at   time.Time
}

var (
	_ transport.Transport           = (*Transport)(nil)
	_ transport.PartitionedConsumer = (*Transport)(nil)
	_ transport.SizeLimiter         = (*Transport)(nil)
	_ transport.PendingCounter      = (*Transport)(nil)
)

// Open connects to the Redis server at rawURL (redis://[user:password@]host:port/db,
// rediss:// for TLS, or unix:///path/to/redis.sock), checks that it keeps
// what it acknowledges, and creates the namespace's streams and consumer
// group when they do not exist.
//
// It refuses, with an error that says what to change: a URL without a
// password for a server that is not on a loopback address or a Unix socket
// (before connecting; see Config.AllowUnauthenticated); an unreachable
// server or refused credentials; Redis older than 7.0, Redis Cluster, or a
// replica; a server without appendonly yes and appendfsync always (see
// Config.AllowLossOnCrash); a maxmemory-policy that evicts keys without a
// TTL (see Config.AllowEviction); and a namespace created with another
// partition count. It does not retry: after Open, a lost connection is
// waited out by every method. Close the transport when done.
func Open(ctx context.Context, rawURL string, cfg *Config) (*Transport, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	opt, safe, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if err := checkAuth(ctx, opt, safe, c.AllowUnauthenticated); err != nil {
		return nil, err
	}
	opt.ClientName = c.ClientName
	t := newTransport(redisClient(opt), c, safe)
	if err := t.check(ctx); err != nil {
		t.cancel()
		_ = t.rdb.Close()
		return nil, err
	}
	if err := t.declare(ctx); err != nil {
		t.cancel()
		_ = t.rdb.Close()
		return nil, err
	}
	return t, nil
}

func newTransport(rdb *redis.Client, c Config, safe string) *Transport {
	life, cancel := context.WithCancel(context.Background())
	ns := c.Namespace
	t := &Transport{
		rdb:       rdb,
		cfg:       c,
		log:       c.Logger.With("component", "idem.redisstreams", "transport", "redisstreams", "namespace", ns),
		safe:      safe,
		consumer:  consumerName(),
		maxBytes:  c.MaxMessageBytes,
		retry:     backoff.Policy{Base: c.ReconnectMin, Max: c.ReconnectMax},
		streams:   make([]string, c.Partitions),
		delays:    make([]string, c.Partitions),
		wake:      "{" + ns + "}:wake",
		meta:      "{" + ns + "}:meta",
		life:      life,
		cancel:    cancel,
		done:      make(chan struct{}),
		cursors:   make([]string, c.Partitions),
		reclaimed: make([]time.Time, c.Partitions),
		arrived:   make(chan struct{}),
	}
	for i := range c.Partitions {
		t.streams[i] = "{" + ns + "}:p" + strconv.Itoa(i)
		t.delays[i] = t.streams[i] + ":delay"
		t.cursors[i] = "0-0"
	}
	return t
}

// consumerName is unique to one Transport: a restarted process never
// shares a consumer name with its predecessor, so the PEL's owner tells
// deliveries of different processes apart.
func consumerName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	host, _ := os.Hostname()
	if host == "" {
		host = "host"
	}
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b)
}

// parseURL parses a Redis URL, with its redacted form for messages.
func parseURL(raw string) (*redis.Options, string, error) {
	safe := redact(raw)
	opt, err := redis.ParseURL(raw)
	if err != nil {
		return nil, safe, fmt.Errorf("redisstreams: the URL %s is not a Redis URL (redis://user:password@host:6379/0, rediss:// for TLS, unix:///path/to/redis.sock): %w", safe, errors.New(strings.ReplaceAll(err.Error(), raw, safe)))
	}
	return opt, safe, nil
}

// redact hides the password of a URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// checkAuth refuses a URL without a password for a server that is not on
// this machine, unless allowed. It runs before anything is sent.
func checkAuth(ctx context.Context, opt *redis.Options, safe string, allow bool) error {
	if allow || opt.Password != "" || opt.Network == "unix" {
		return nil
	}
	host, _, err := net.SplitHostPort(opt.Addr)
	if err != nil {
		host = opt.Addr
	}
	if isLoopback(ctx, host) {
		return nil
	}
	return fmt.Errorf("redisstreams: the URL %s has no password and %s is not a loopback address: anyone who can reach an unauthenticated Redis can read, change or delete the messages; "+
		"set a password on the server (requirepass, or an ACL user) and put it in the URL (redis://user:password@%s/0), or set Config.AllowUnauthenticated to connect anyway", safe, host, opt.Addr)
}

// isLoopback reports whether host is localhost or resolves only to
// loopback addresses.
func isLoopback(ctx context.Context, host string) bool {
	if host == "localhost" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(addrs) == 0 {
		return false
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return false
		}
	}
	return true
}

// explain turns a failure to talk to the server into advice.
func (t *Transport) explain(what string, err error) error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"), strings.Contains(msg, "invalid password"), strings.Contains(msg, "invalid username-password"):
		return fmt.Errorf("redisstreams: the Redis server at %s refused the user name or password: check the credentials in the URL: %w", t.safe, err)
	case strings.HasPrefix(msg, "NOPERM"):
		return fmt.Errorf("redisstreams: %s: the Redis user lacks a permission: grant it the stream, sorted-set, hash, scripting and connection commands, INFO, CONFIG GET and TIME on the keys '{%s}:*' (ACL SETUSER <user> ~{%s}:* +@stream +@sortedset +@hash +@scripting +@connection +info +config|get +time): %w",
			what, t.cfg.Namespace, t.cfg.Namespace, err)
	case transient(err):
		return fmt.Errorf("redisstreams: cannot reach the Redis server at %s: check the host and port in the URL and that Redis is running and listening there: %w", t.safe, err)
	}
	return fmt.Errorf("redisstreams: %s on %s: %w", what, t.safe, err)
}

// check refuses a server that cannot hold the transport's promises.
func (t *Transport) check(ctx context.Context) error {
	raw, err := t.rdb.Info(ctx).Result() // the default sections, on any version
	if err != nil {
		return t.explain("reading INFO", err)
	}
	info := map[string]string{}
	for _, line := range strings.Split(raw, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			info[k] = v
		}
	}
	if v := info["redis_version"]; majorVersion(v) < 7 {
		return fmt.Errorf("redisstreams: the server at %s runs Redis %s: the transport needs Redis 7.0 or later (XAUTOCLAIM, and XCLAIM of deleted entries as 7.0 handles them): upgrade the server", t.safe, v)
	}
	if info["cluster_enabled"] == "1" {
		return fmt.Errorf("redisstreams: the server at %s is a Redis Cluster node: Redis Cluster is not supported; use a standalone server (every key of a namespace shares one hash slot, so a future cluster client can use it)", t.safe)
	}
	if info["role"] == "slave" {
		return fmt.Errorf("redisstreams: the server at %s is a replica, which cannot take writes: connect to the primary", t.safe)
	}
	if p := info["maxmemory_policy"]; strings.HasPrefix(p, "allkeys-") && !t.cfg.AllowEviction {
		return fmt.Errorf("redisstreams: the server at %s has maxmemory-policy %s, which may evict a whole stream of unprocessed messages under memory pressure: set maxmemory-policy noeviction (a volatile-* policy spares keys without a TTL, as the transport's are), or set Config.AllowEviction to accept the loss", t.safe, p)
	}
	aof := info["aof_enabled"]
	fsync, cerr := t.configGet(ctx, "appendfsync")
	if bulk, err := t.configGet(ctx, "proto-max-bulk-len"); err == nil {
		// The body travels in one bulk string; leave room for the rest of
		// the command.
		if n, err := strconv.ParseInt(bulk, 10, 64); err == nil && n > 1<<16 && int64(t.maxBytes) > n-1<<16 {
			t.maxBytes = int(n - 1<<16)
		}
	}
	if t.cfg.AllowLossOnCrash {
		return nil
	}
	if cerr != nil {
		return fmt.Errorf("redisstreams: cannot read appendfsync from the server at %s (CONFIG GET refused: %w), so it may acknowledge writes it loses in a crash: allow CONFIG GET for this user, or make sure the server runs with appendonly yes and appendfsync always and set Config.AllowLossOnCrash", t.safe, cerr)
	}
	if aof != "1" || fsync != "always" {
		return fmt.Errorf("redisstreams: the server at %s does not fsync its append-only file before it answers (appendonly %s, appendfsync %s), so a crash or power loss can lose messages Publish reported as stored and undo acknowledgements: "+
			"run it with appendonly yes and appendfsync always (redis-server --appendonly yes --appendfsync always, or CONFIG SET appendonly yes, CONFIG SET appendfsync always and CONFIG REWRITE), or set Config.AllowLossOnCrash to accept that acknowledged messages may be lost",
			t.safe, map[string]string{"1": "yes", "0": "no"}[aof], fsync)
	}
	return nil
}

// majorVersion returns the major version of a Redis version string.
func majorVersion(v string) int {
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return 0
	}
	return n
}

// configGet reads one server setting.
func (t *Transport) configGet(ctx context.Context, name string) (string, error) {
	m, err := t.rdb.ConfigGet(ctx, name).Result()
	if err != nil {
		return "", err
	}
	v, ok := m[name]
	if !ok {
		return "", fmt.Errorf("CONFIG GET %s returned nothing", name)
	}
	return v, nil
}

// declare records the partition count and creates each partition's
// stream and the consumer group, from the start of the stream so that
// messages published before the group existed are read too. It is
// idempotent.
func (t *Transport) declare(ctx context.Context) error {
	n := strconv.Itoa(t.cfg.Partitions)
	if err := t.rdb.HSetNX(ctx, t.meta, "partitions", n).Err(); err != nil {
		return t.explain("recording the partition count in "+t.meta, err)
	}
	got, err := t.rdb.HGet(ctx, t.meta, "partitions").Result()
	if err != nil {
		return t.explain("reading the partition count in "+t.meta, err)
	}
	if got != n {
		return fmt.Errorf("redisstreams: namespace %q was created with %s partitions, not %d: use the same Config.Partitions on every replica and tool (the streams are {%s}:p0 to {%s}:pN-1), or another Config.Namespace",
			t.cfg.Namespace, got, t.cfg.Partitions, t.cfg.Namespace, t.cfg.Namespace)
	}
	cmds, _ := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, s := range t.streams {
			p.XGroupCreateMkStream(ctx, s, group, "0")
		}
		return nil
	})
	for i, c := range cmds {
		if err := c.Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return t.explain("creating the consumer group of "+t.streams[i], err)
		}
	}
	return nil
}

// transient reports whether err, or any error it wraps or joins, means
// the server could not be reached or is not ready yet (a restart, a
// failover), so that the same command may succeed later.
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	return anyError(err, func(err error) bool {
		var ne net.Error
		if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, redis.ErrPoolTimeout) ||
			errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
			return true
		}
		msg := err.Error()
		for _, p := range []string{"LOADING", "BUSY ", "MASTERDOWN", "TRYAGAIN", "READONLY", "CLUSTERDOWN"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return strings.Contains(msg, "connection refused") || strings.Contains(msg, "connection reset")
	})
}

// anyError reports whether f holds for err or any error in its tree.
func anyError(err error, f func(error) bool) bool {
	if err == nil {
		return false
	}
	if f(err) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return anyError(u.Unwrap(), f)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if anyError(e, f) {
				return true
			}
		}
	}
	return false
}

// noGroup reports whether err says a stream or its consumer group is
// missing: the namespace was deleted, or the server lost its data.
func noGroup(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOGROUP")
}

// do runs op until it succeeds or fails with an error that is not
// transient, ctx ends, the transport is closed, or (when budget is
// positive) budget has passed. While the server cannot be reached it logs
// once, and once more when it can again. A missing stream or group is
// declared again (the server lost its data, or the namespace was deleted
// under the transport) and op retried.
func (t *Transport) do(ctx context.Context, what string, budget time.Duration, op func(ctx context.Context) error) error {
	start := time.Now()
	redeclared := false
	for attempt := 1; ; attempt++ {
		if t.isClosed() {
			return transport.ErrClosed
		}
		err := t.attempt(ctx, op)
		if err == nil {
			t.recovered()
			return nil
		}
		if noGroup(err) && !redeclared {
			redeclared = true
			t.log.Warn("redisstreams: a stream or its consumer group is missing; creating them again", "op", what, "error", err)
			if derr := t.declare(ctx); derr == nil {
				continue
			}
		}
		if !transient(err) || ctx.Err() != nil {
			if t.isClosed() {
				return transport.ErrClosed
			}
			return fmt.Errorf("redisstreams: %s: %w", what, err)
		}
		if budget > 0 && time.Since(start) > budget {
			return fmt.Errorf("redisstreams: %s: the server at %s was unreachable for %v: %w", what, t.safe, budget, err)
		}
		t.lost(what, err)
		select {
		case <-time.After(t.retry.Delay(attempt)):
		case <-ctx.Done():
			return fmt.Errorf("redisstreams: %s: %w (while the server at %s is unreachable: %w)", what, ctx.Err(), t.safe, err)
		case <-t.done:
			return transport.ErrClosed
		}
	}
}

// attempt runs op once and returns when it does or when ctx ends,
// whichever comes first. go-redis ends a command at its read or write
// timeout, or at the context's deadline (Options.ContextTimeoutEnabled),
// but not when the context is cancelled: on a link that went silent, a
// command whose context was cancelled would wait for the timeout (3s by
// default, more when the URL sets read_timeout), and so would
// Engine.Run after Config.StopTimeout. An op left behind ends at that
// timeout, or at once when Close closes the client; what it claimed or
// settled on the server is as if the reply had been lost.
func (t *Transport) attempt(ctx context.Context, op func(ctx context.Context) error) error {
	if ctx.Done() == nil {
		return op(ctx)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return transport.ErrClosed
	}
	t.wg.Add(1)
	t.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		defer t.wg.Done()
		done <- op(ctx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lost logs, once per outage, that the server cannot be reached.
func (t *Transport) lost(what string, err error) {
	t.mu.Lock()
	first := !t.down
	t.down = true
	t.mu.Unlock()
	if first {
		t.log.Warn("redisstreams: the Redis server cannot be reached; retrying", "server", t.safe, "op", what, "error", err)
	}
}

// recovered logs the end of an outage.
func (t *Transport) recovered() {
	t.mu.Lock()
	was := t.down
	t.down = false
	t.mu.Unlock()
	if was {
		t.log.Info("redisstreams: the Redis server can be reached again", "server", t.safe)
	}
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// MaxMessageBytes is the largest Envelope.Body Publish accepts:
// Config.MaxMessageBytes, lowered to fit the server's proto-max-bulk-len.
func (t *Transport) MaxMessageBytes() int { return t.maxBytes }

// Streams returns the keys of the partition streams, in partition order.
func (t *Transport) Streams() []string { return append([]string(nil), t.streams...) }

// Close stops the transport: blocked Receives return transport.ErrClosed
// and every method afterwards returns it too. Deliveries read for another
// partition of ReceivePartition and never handed out are returned to the
// namespace at once; deliveries handed out and not settled are reclaimed
// by another consumer after their lease. The consumer name is removed from
// the group when it holds nothing. Close is idempotent.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.done)
	buf := t.buf
	t.buf = nil
	consuming := t.consuming
	t.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if len(buf) > 0 {
		ds := make([]transport.Delivery, len(buf))
		for i, h := range buf {
			ds[i] = h.d
		}
		if _, err := t.settle(ctx, ds, 0); err != nil {
			t.log.Debug("redisstreams: returning unhanded deliveries at close failed; their lease will expire", "error", err)
		}
	}
	if consuming {
		_ = forgetScript.Run(ctx, t.rdb, t.streams, group, t.consumer, 0, "self").Err()
	}
	// Closing the client closes every connection, also those a blocked
	// XREAD waits on, so the goroutines end at once.
	t.cancel()
	err := t.rdb.Close()
	t.wg.Wait()
	return err
}

// redisClient is the go-redis client of a Transport.
// A context's deadline bounds each command (ContextTimeoutEnabled);
// Transport.attempt handles its cancellation.
func redisClient(opt *redis.Options) *redis.Client {
	opt.ContextTimeoutEnabled = true
	return redis.NewClient(opt)
}

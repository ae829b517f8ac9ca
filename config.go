package idem

import (
	"fmt"
	"log/slog"
	"runtime"
	"time"
)

// Config configures an Engine. The zero value means the defaults given in
// each field's comment; negative values are refused by NewEngine, except
// where a field's comment gives them a meaning.
type Config struct {
	// Logger receives the engine's logs. Nil means slog.Default().
	Logger *slog.Logger
	// Observe, when set, is called after every committed unit of work with
	// what it did, for metrics (a transition latency histogram, say). It
	// runs on the engine's goroutines and must not block.
	Observe func(Observation)
	// Tracer, when set, is told of every unit of work, message and
	// background pass, and gives the trace context that emitted messages
	// carry (see Tracer; otelidem implements it with OpenTelemetry). Nil
	// means no tracing: emitted messages copy the incoming message's
	// traceparent header.
	Tracer Tracer
	// Clock returns the current time. Nil means time.Now.
	Clock func() time.Time

	// BatchSize is the most deliveries taken from the transport and
	// processed as one batch. Default 64. A BatchSize below 16 asks for
	// latency first: a consumer then takes BatchSize deliveries for each
	// lane of its share of Lanes (Lanes / Consumers) in one receive, and
	// deals the saga keys round robin to that many units of work (a key's
	// messages share one), so that several commit at once. BatchSize 1
	// with Lanes 8 and one consumer keeps up to eight messages in flight,
	// each committed alone when their keys differ.
	BatchSize int
	// Lanes is how many units of work run in parallel, across every
	// consumer: a batch is split into lanes by saga key (the messages of
	// one key always share a lane), at most its share Lanes / Consumers
	// (rounded up) and one per 16 messages, and each lane holds one store
	// connection while its unit of work is open. Default 2×GOMAXPROCS.
	Lanes int
	// Consumers is how many batches are received and processed at once.
	// More than one overlaps one batch's commit with the next one's
	// receive and load, which a database with group commit turns into
	// throughput. The consumers take turns to receive, and the messages of
	// one saga key are applied in the order this engine received them: a
	// batch's unit of work waits for an earlier batch's that holds one of
	// its keys (see PartitionedReceive for order across replicas).
	// Replicas on a queue they can split (transport.SharedConsumer:
	// pgstore's) each receive their own share of the saga keys, from
	// the heartbeats of the replicas running, so that their units of work
	// do not race for the same sagas (docs/scaling.md, "Many replicas").
	// Default 4, or 1 on a store with a single writer (store.SingleWriter:
	// sqlitestore).
	Consumers int
	// PartitionedReceive makes each consumer receive only its own
	// partitions of the keys, when the transport is a
	// transport.PartitionedConsumer (pgstore's queue; the brokers
	// partition by their own Config.Partitions instead): the consumers
	// then never take turns, and replicas with the same Consumers keep one
	// key's messages in one consumer at a time. Partitions follow the
	// envelope's CorrelationID (its ID without one), so every message of a
	// saga must carry its key as CorrelationID: Engine.NewEnvelope,
	// Engine.Publish and the messages sagas emit set it for the types this
	// engine's sagas consume, but envelopes another engine publishes, or
	// that pgstore.PublishTx takes, carry only what they were given. Two
	// messages of one saga in different partitions are applied in no
	// particular order, and one that overtakes the message starting its
	// saga is dead-lettered as saga_not_found. Default false.
	PartitionedReceive bool

	// MaxAttempts is how many deliveries a message gets when it fails with
	// a transient error before it is dead-lettered. Default 10.
	MaxAttempts int
	// RetryBase and RetryMax bound the exponential backoff (with jitter)
	// between transient failures. The receive, relay and timer loops
	// back off the same way while their store or transport keeps
	// failing, capped at 10 s. Defaults 100ms and 1m.
	RetryBase, RetryMax time.Duration
	// MaxLeaseRenewal is how long the engine keeps renewing the leases of
	// a batch that is still running, on a transport that can renew them
	// (transport.LeaseExtender). Past it the engine stops, logs the batch's
	// messages at Error, and lets the leases run out, so that a handler
	// that hangs does not hold its batch, and the keys of its lane, for
	// ever: another consumer then takes the batch, and a message that
	// outlives its lease again and again is run alone and dead-lettered
	// after MaxAttempts. Default ten times the transport's lease.
	MaxLeaseRenewal time.Duration
	// ConflictRetries is how many times a unit of work that lost an
	// optimistic-concurrency race is re-applied at once (with a short
	// jittered pause) before its messages are returned to the transport.
	// Default 16.
	ConflictRetries int

	// MaxKeyLen is the longest canonical saga key accepted, in bytes.
	// Default 256.
	MaxKeyLen int
	// MaxBodyBytes is the largest message body accepted, in bytes, and
	// the largest a saga may emit. Default 1 MiB, or less when the
	// transport carries less (a transport with a MaxMessageBytes method,
	// such as NATS with its max_payload); a larger value than the
	// transport carries is refused.
	MaxBodyBytes int

	// Dedup chooses whether the messages this engine's sagas emit carry a
	// dedup token (DedupToken, which needs a store.TokenStore) or rely on
	// their consumers' retention inbox alone (DedupRetention, the
	// default). Whatever it says, the engine claims the token of every
	// message it receives marked with transport.HeaderToken when its
	// store keeps tokens.
	Dedup Dedup

	// Retention is how long finished sagas (and their inbox records) are
	// kept so that late duplicates are still recognised, and how long
	// after its next attempt a retry whose message never came back is
	// kept. Default 7 days.
	Retention time.Duration
	// OutboxRetention is how long sent outbox rows are kept. Default 1h.
	OutboxRetention time.Duration
	// SweepInterval is the pause between sweeps. Default 1m.
	SweepInterval time.Duration
	// SweepBatch bounds the rows one sweep statement deletes. Default 1000.
	SweepBatch int
	// TokenRetention is how long a dedup token minted and never claimed
	// is kept before the sweeper deletes it, on a store that is a
	// store.TokenSweeper. A message whose token was deleted is skipped as
	// a duplicate if it arrives later: keep it longer than any message can
	// wait. The token of a dead-lettered message is kept as long as its
	// dead letter, so that a replay is applied. Default
	// DefaultTokenRetention (30 days).
	TokenRetention time.Duration

	// TimerInterval is the pause between polls for due timers and, on an
	// engine that registered schedules, for due schedule ticks. Default 1s.
	TimerInterval time.Duration
	// RelayInterval is the pause between outbox relay passes; RelayAge is
	// how old an unsent outbox row must be before the relay sends it (the
	// committing engine sends fresh rows itself). Defaults 1s and 5s.
	RelayInterval, RelayAge time.Duration
	// ClaimLease is how long a relay or timer claim keeps other replicas
	// away from the claimed rows, measured on the store's clock (the
	// database's for PostgreSQL and SQLite, so replicas whose clocks
	// differ agree on it). Default 30s.
	ClaimLease time.Duration
	// StopTimeout is how long Run waits, once its context ends, for the
	// batch in flight to commit and settle. Default 10s.
	StopTimeout time.Duration
	// HeartbeatInterval is the pause between the heartbeats this replica
	// writes to a store.ReplicaRegistry; a replica silent for three
	// intervals is listed as gone. An engine with Limits declares them
	// again in the store at this pace, at most every
	// store.DeclarationRefresh. Default 10s.
	HeartbeatInterval time.Duration
	// JournalPayloadLimit bounds, in bytes, each of what a journal entry
	// keeps of its message's payload and headers and of the saga's state
	// after the step (store.JournalDetail; beyond it they are cut and
	// marked truncated, and a cut state gets no diff in the console).
	// Default 4096; at most 16 MiB; negative: none of the three is kept.
	JournalPayloadLimit int
	// Limits are the flow-control limits the engine admits messages
	// under, across every replica that shares the store
	// (docs/flow-control.md): concurrency caps and rate limits by message
	// type, saga type or named resource, partitioned by a key computed
	// from the envelope. Their values can be changed at runtime (idem
	// limits set), and a change reaches every replica within one
	// LimitsInterval. They need a store that keeps limits
	// (store.Limiter: pgstore, sqlitestore, memstore), which admits as it
	// leases when it is the transport (store.AdmittingQueue); beside a
	// broker, whose leases the engine must be able to extend
	// (transport.LeaseExtender), the engine admits through the store
	// after each receive. Start refuses them otherwise.
	Limits []Limit
	// LimitsInterval is how often the engine reads the limits' runtime
	// values from the store, when Limits are declared. Default 1s.
	LimitsInterval time.Duration
	// LimitCounterIdle is how long a flow-control counter (a limit's, or
	// one key's of a keyed limit) must go without an admission before the
	// sweeper deletes it, on a store that is a store.Limiter, once it has
	// no live hold and its bucket is full again (or it has none): a
	// deleted counter starts again full, so deleting it changes no
	// decision. The sweeper also forgets a limit's declaration that no
	// running engine made for LimitCounterIdle, and at least 10 ×
	// store.DeclarationRefresh (docs/flow-control.md). Default 1h.
	LimitCounterIdle time.Duration
	// FairShare receives in fair order instead of the queue's
	// (docs/flow-control.md): the values of each message's
	// idem-fairness-key header (a tenant) take turns, weighted by
	// idem-fairness-weight, and within one value idem-priority orders
	// the messages, higher first, so that a tenant with 100,000 queued
	// messages does not hold up one with 10. The messages of one saga key
	// (correlation ID, else message ID) keep their order. Messages a saga
	// emits inherit the three headers. The first fair receive builds two
	// indexes on the queue. It needs the store's own queue as transport,
	// as Limits do, and switches off claiming a backlog in the unit of
	// work.
	FairShare bool
	// DeployCheck runs the deploy check (package deploycheck) as a
	// start-up check: Start compares the registered machines with the
	// live sagas, pending timers, queued messages and running replicas
	// the store holds, before it records this build's definitions. Off
	// (the zero value) skips it; DeployCheckWarn logs each hazard and
	// starts; DeployCheckRefuse refuses to start on a hazard, naming each
	// one and what to change. The check reads every live saga's state
	// with grouped queries: about a second per million sagas on
	// PostgreSQL (docs/deploys.md).
	DeployCheck DeployCheckMode
	// DeployCheckSample, when positive and DeployCheck is on, makes the
	// deploy check also decode up to this many live state documents of
	// each registered saga type (the least recently updated first) with
	// the machine's upgrade functions, and report each that fails with
	// its key (deploycheck.StateUndecodable): Start reads at most this
	// many documents per saga type. Zero (the default) decodes none;
	// negative is refused.
	DeployCheckSample int
}

// DeployCheckMode is what Start does with the deploy check
// (Config.DeployCheck).
type DeployCheckMode string

// The deploy check's modes.
const (
	DeployCheckOff    DeployCheckMode = ""
	DeployCheckWarn   DeployCheckMode = "warn"
	DeployCheckRefuse DeployCheckMode = "refuse"
)

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	// In field order, so that with several bad fields the first is named.
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"BatchSize", int64(out.BatchSize)}, {"Lanes", int64(out.Lanes)}, {"Consumers", int64(out.Consumers)},
		{"MaxAttempts", int64(out.MaxAttempts)}, {"RetryBase", int64(out.RetryBase)}, {"RetryMax", int64(out.RetryMax)},
		{"ConflictRetries", int64(out.ConflictRetries)}, {"MaxKeyLen", int64(out.MaxKeyLen)}, {"MaxBodyBytes", int64(out.MaxBodyBytes)},
		{"Retention", int64(out.Retention)}, {"OutboxRetention", int64(out.OutboxRetention)}, {"SweepInterval", int64(out.SweepInterval)},
		{"SweepBatch", int64(out.SweepBatch)}, {"TokenRetention", int64(out.TokenRetention)}, {"TimerInterval", int64(out.TimerInterval)}, {"RelayInterval", int64(out.RelayInterval)},
		{"RelayAge", int64(out.RelayAge)}, {"ClaimLease", int64(out.ClaimLease)}, {"StopTimeout", int64(out.StopTimeout)},
		{"HeartbeatInterval", int64(out.HeartbeatInterval)}, {"MaxLeaseRenewal", int64(out.MaxLeaseRenewal)},
		{"LimitsInterval", int64(out.LimitsInterval)}, {"LimitCounterIdle", int64(out.LimitCounterIdle)},
	} {
		if f.v < 0 {
			return out, fmt.Errorf("idem: Config.%s is negative (%d): use 0 for the default or a positive value", f.name, f.v)
		}
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defd := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.Clock == nil {
		out.Clock = time.Now
	}
	def(&out.BatchSize, 64)
	def(&out.Lanes, 2*runtime.GOMAXPROCS(0))
	def(&out.Consumers, 4)
	def(&out.MaxAttempts, 10)
	def(&out.ConflictRetries, 16)
	def(&out.MaxKeyLen, defaultMaxKeyLen)
	def(&out.MaxBodyBytes, 1<<20)
	def(&out.SweepBatch, 1000)
	defd(&out.RetryBase, 100*time.Millisecond)
	defd(&out.RetryMax, time.Minute)
	defd(&out.LimitsInterval, time.Second)
	defd(&out.LimitCounterIdle, time.Hour)
	defd(&out.Retention, 7*24*time.Hour)
	defd(&out.OutboxRetention, time.Hour)
	defd(&out.SweepInterval, time.Minute)
	defd(&out.TokenRetention, DefaultTokenRetention)
	defd(&out.TimerInterval, time.Second)
	defd(&out.RelayInterval, time.Second)
	defd(&out.RelayAge, 5*time.Second)
	defd(&out.ClaimLease, 30*time.Second)
	defd(&out.StopTimeout, 10*time.Second)
	defd(&out.HeartbeatInterval, 10*time.Second)
	def(&out.JournalPayloadLimit, defaultJournalPayloadLimit)
	if out.JournalPayloadLimit > maxJournalPayloadLimit {
		return out, fmt.Errorf("idem: Config.JournalPayloadLimit is %d, above the maximum %d: lower it, or make it negative to keep no payload", out.JournalPayloadLimit, maxJournalPayloadLimit)
	}
	switch out.DeployCheck {
	case DeployCheckOff, DeployCheckWarn, DeployCheckRefuse:
	default:
		return out, fmt.Errorf("idem: Config.DeployCheck is %q: use %q, %q or leave it empty (off)", out.DeployCheck, DeployCheckWarn, DeployCheckRefuse)
	}
	if out.DeployCheckSample > 0 && out.DeployCheck == DeployCheckOff {
		return out, fmt.Errorf("idem: Config.DeployCheckSample is %d but Config.DeployCheck is off, so nothing would be sampled: set DeployCheck to %q or %q, or DeployCheckSample to 0", out.DeployCheckSample, DeployCheckWarn, DeployCheckRefuse)
	}
	if out.DeployCheckSample < 0 {
		return out, fmt.Errorf("idem: Config.DeployCheckSample is %d: use 0 to decode no live state document at start, or how many to decode per saga type", out.DeployCheckSample)
	}
	if out.RetryMax < out.RetryBase {
		return out, fmt.Errorf("idem: Config.RetryMax (%s) is below Config.RetryBase (%s): raise RetryMax", out.RetryMax, out.RetryBase)
	}
	return out, nil
}

// defaultMaxKeyLen is Config.MaxKeyLen's default.
const defaultMaxKeyLen = 256

// DefaultTokenRetention is Config.TokenRetention's default: four times
// Config.Retention's, so that a dead letter kept a few weeks can still be
// replayed with its token.
const DefaultTokenRetention = 30 * 24 * time.Hour

// Config.JournalPayloadLimit's default and maximum.
const defaultJournalPayloadLimit, maxJournalPayloadLimit = 4096, 16 << 20

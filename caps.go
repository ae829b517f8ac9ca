package idem

import (
	"log/slog"
	"reflect"

	"github.com/idemhq/idem/internal/backoff"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// base is what the engine's parts share, made once by NewEngine: the
// configuration, the store and transport with their capabilities, and the
// observer that every part reports to. A part embeds it and holds nothing
// else of the Engine's (River's baseservice.Archetype plays this role).
type base struct {
	cfg   Config
	log   *slog.Logger
	store store.Store
	tr    transport.Transport
	caps  capabilities
	obs   observer
	// health is what Ready reports of the store (health.go); it also
	// observes units of work through obs.
	health *health
	// shares is this replica's share of a queue replicas split (shares.go);
	// nil: the consumers receive the whole queue, or their partitions.
	shares *shares
	trace  *tracing
	retry  backoff.Policy
}

// capabilities are the optional interfaces of the engine's store and
// transport, resolved once by NewEngine: no other file type-asserts a
// store, a transport or a unit of work.
type capabilities struct {
	// queue is set when the transport is the store's own queue (the same
	// value): deliveries are consumed and emissions enqueued inside each
	// unit of work.
	queue        bool
	singleWriter bool
	tokens       store.TokenStore              // nil: no dedup tokens
	scheduler    store.Scheduler               // nil: no schedules
	replayer     store.DeadLetterReplayer      // nil: a replay deletes the dead letter
	retries      store.RetryRecorder           // nil: no retry state is kept
	retrySweeper store.RetrySweeper            // nil: retries are not swept
	limiter      store.Limiter                 // nil: no flow-control counters to sweep
	definitions  store.DefinitionStore         // nil: definitions are not recorded
	partitioned  transport.PartitionedConsumer // nil: one stream
	leases       *leases                       // nil: leases cannot be extended
	maxMessage   int                           // the transport's body limit; 0: none
	poolSize     int                           // the store's pool size; 0: unknown
	describe     transport.Description
}

func resolveCapabilities(st store.Store, tr transport.Transport) capabilities {
	var c capabilities
	if q, ok := st.(store.Queue); ok && tr != nil && reflect.TypeOf(q).Comparable() && reflect.TypeOf(tr).Comparable() && any(q) == any(tr) {
		c.queue = true
	}
	_, c.singleWriter = st.(store.SingleWriter)
	c.tokens, _ = st.(store.TokenStore)
	c.scheduler, _ = st.(store.Scheduler)
	c.replayer, _ = st.(store.DeadLetterReplayer)
	c.retries, _ = st.(store.RetryRecorder)
	c.retrySweeper, _ = st.(store.RetrySweeper)
	c.limiter, _ = st.(store.Limiter)
	c.definitions, _ = st.(store.DefinitionStore)
	c.partitioned, _ = tr.(transport.PartitionedConsumer)
	if ext, ok := tr.(transport.LeaseExtender); ok {
		c.leases = newLeases(ext)
	}
	if l, ok := tr.(transport.SizeLimiter); ok {
		c.maxMessage = l.MaxMessageBytes()
	}
	if ps, ok := st.(store.PoolSizer); ok {
		c.poolSize = ps.PoolSize()
	}
	if d, ok := tr.(transport.Describer); ok {
		c.describe = d.Describe()
	}
	return c
}

// The capabilities of one unit of work. Each store's units of work are of
// one type, so Start learns them once from a probe (probeUnitOfWork); these
// return the unit of work as the capability, or false.

func queueUnit(uow store.UnitOfWork) (store.QueueUnitOfWork, bool) {
	q, ok := uow.(store.QueueUnitOfWork)
	return q, ok
}

func claimUnit(uow store.UnitOfWork) (store.ClaimUnitOfWork, bool) {
	c, ok := uow.(store.ClaimUnitOfWork)
	return c, ok
}

func domainTxUnit(uow store.UnitOfWork) (store.DomainTxUnitOfWork, bool) {
	d, ok := uow.(store.DomainTxUnitOfWork)
	return d, ok
}

func scheduleUnit(uow store.UnitOfWork) (store.ScheduleUnitOfWork, bool) {
	s, ok := uow.(store.ScheduleUnitOfWork)
	return s, ok
}

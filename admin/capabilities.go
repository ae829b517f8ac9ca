package admin

import (
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
	"github.com/idemhq/idem/transport"
)

// capabilities are the optional interfaces of the store and the transport
// that the operator side uses, resolved once in New. A nil field means
// "this store (or transport) cannot", and the page or the API says so.
type capabilities struct {
	rowCounter        readmodel.RowCounter
	rowEstimator      readmodel.RowEstimator
	unresolvedCounter readmodel.UnresolvedCounter
	deadLetters       readmodel.DeadLetterQuerier
	timers            readmodel.TimerQuerier
	instances         readmodel.InstanceQuerier
	queryCounter      readmodel.QueryCounter
	journalTailer     readmodel.JournalTailer
	outboxSent        readmodel.OutboxSentReader
	census            readmodel.Censuser // deploys.go

	definitions store.DefinitionStore // deploys.go

	retries   store.RetryRecorder
	schedules store.Scheduler
	replicas  store.ReplicaRegistry
	// replicaCounter counts every replica record by state; nil where the
	// store cannot, and the counts are then those of the records listed.
	replicaCounter readmodel.ReplicaCounter
	tokens         store.TokenSweeper
	storeQueue     store.Queue
	limits         store.Limiter         // limits.go
	admissionWaits store.AdmissionWaiter // console_why_admission.go
	shares         store.FairShareReader

	// transportPending counts the engine's transport's messages, when it
	// can; pending is the queue depth source of the overview: the
	// configured transport, else the store when it is also the queue.
	transportPending transport.PendingCounter
	pending          transport.PendingCounter
}

// resolveCapabilities finds what st, the engine's transport tr and the
// configured transport cfgTr can do.
func resolveCapabilities(st store.Store, tr, cfgTr transport.Transport) *capabilities {
	c := &capabilities{}
	c.rowCounter, _ = st.(readmodel.RowCounter)
	c.rowEstimator, _ = st.(readmodel.RowEstimator)
	c.unresolvedCounter, _ = st.(readmodel.UnresolvedCounter)
	c.deadLetters, _ = st.(readmodel.DeadLetterQuerier)
	c.timers, _ = st.(readmodel.TimerQuerier)
	c.instances, _ = st.(readmodel.InstanceQuerier)
	c.queryCounter, _ = st.(readmodel.QueryCounter)
	c.journalTailer, _ = st.(readmodel.JournalTailer)
	c.outboxSent, _ = st.(readmodel.OutboxSentReader)
	c.census, _ = st.(readmodel.Censuser)
	c.definitions, _ = st.(store.DefinitionStore)
	c.retries, _ = st.(store.RetryRecorder)
	c.schedules, _ = st.(store.Scheduler)
	c.replicas, _ = st.(store.ReplicaRegistry)
	c.replicaCounter, _ = st.(readmodel.ReplicaCounter)
	c.tokens, _ = st.(store.TokenSweeper)
	c.storeQueue, _ = st.(store.Queue)
	c.limits, _ = st.(store.Limiter)
	c.admissionWaits, _ = st.(store.AdmissionWaiter)
	c.shares, _ = st.(store.FairShareReader)
	c.transportPending, _ = tr.(transport.PendingCounter)
	c.pending, _ = cfgTr.(transport.PendingCounter)
	if c.pending == nil {
		c.pending, _ = st.(transport.PendingCounter)
	}
	return c
}

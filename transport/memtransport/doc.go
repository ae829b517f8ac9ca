// Package memtransport is an in-process, at-least-once implementation of
// transport.Transport with fault injection, for tests and demonstrations.
//
// A Transport keeps every published envelope in memory until it is acked.
// Deliveries carry a lease (the visibility timeout, Config.Lease): an
// unsettled delivery is handed out again once its lease expires, with Attempt
// incremented and a new Token. Settling a delivery whose lease expired and
// that was handed out again returns an error wrapping transport.ErrLeaseLost
// (fencing); settling a delivery twice is not an error.
//
// Faults are injected through Config: extra copies of each published envelope
// (Duplicate, DuplicateRandom), random delivery order across correlation ids
// (Reorder), and acks that report success but are dropped, so the message
// comes back after its lease (LoseAckRate). The random decisions come from a
// math/rand/v2 source seeded with Config.Seed.
//
// Stats, Pending and Unsettled expose counters and queue sizes for
// assertions and progress reports. Besides transport.Transport, a Transport
// is a transport.PartitionedConsumer (partitioned as pgstore and the
// brokers are, by the canonical correlation key), a transport.SizeLimiter
// (Config.MaxMessageBytes) and a transport.PendingCounter.
//
// Timing uses the standard library clock and timers (time.Now and
// time.AfterFunc), so a Transport created inside a testing/synctest bubble
// runs on the bubble's fake clock: leases and Nack delays then elapse
// instantly and deterministically. Such a Transport must be used only from
// inside that bubble.
//
// The package passes the transporttest conformance suite with every
// feature: Fencing, NativeDelay, Partitioned, SizeLimit (with
// Config.MaxMessageBytes set) and Pending.
package memtransport

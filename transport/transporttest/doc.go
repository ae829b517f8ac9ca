// Package transporttest is the conformance suite that every
// transport.Transport implementation runs.
//
// A backend's test file calls Run once per configuration, describing what the
// backend can do with a Features value and giving a constructor that returns
// a fresh, isolated transport for each subtest (its own queue, stream or
// schema):
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, transporttest.Features{
//			Lease:       50 * time.Millisecond,
//			Fencing:     true,
//			NativeDelay: true,
//			Partitioned: true, // transport.PartitionedConsumer
//			SizeLimit:   true, // transport.SizeLimiter
//			Pending:     true, // transport.PendingCounter
//		}, func(t *testing.T) transport.Transport {
//			return memtransport.New(&memtransport.Config{Lease: 50 * time.Millisecond, MaxMessageBytes: 1 << 20})
//		})
//	}
//
// Every subtest runs in parallel with the others and closes its transport
// when it ends; the constructor may register further cleanup with t.Cleanup.
// Subtests that need a capability the Features value does not claim are
// skipped with a message that says why, so a report shows what a backend does
// not do instead of pretending it does; one whose capability is claimed but
// whose interface the transport does not implement fails.
//
// Keep Features.Lease short (tens of milliseconds for in-process transports,
// about a second for a broker): the suite waits up to 20 leases for a
// redelivery and 3 leases to conclude that nothing more arrives, so the
// suite's run time grows with it.
//
// The suite synchronises with channels and with Receive deadlines, never with
// time.Sleep. It checks the transport contract only; deduplication is the
// engine's job (its inbox), so the suite accepts a transport that delivers a
// message twice. A transport that drops duplicates at publish (a broker's
// deduplication window) must still deliver a deliberate re-publish, which
// carries transport.HeaderRepublish (a dead letter's replay, a "retry
// now"): every transport runs those cases, and Features.PublishDedup adds
// the check that it drops exactly the copies with a repeated
// transport.PublishID.
//
// A behaviour change in one backend starts with a new case here, so that it
// holds for every backend.
package transporttest

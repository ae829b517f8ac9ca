// Package tuning holds the engine's experimental switches: consume paths
// that are built and tested but measured not to pay in the default
// configuration. Only idem bench and tests set them; an application has no
// reason to.
//
// Each switch is read when an engine starts. Tests that set one must not
// call t.Parallel, so that no parallel test starts an engine meanwhile.
package tuning

import "sync/atomic"

// ClaimInTurn lets consumers that take turns on one stream (Config.Consumers
// > 1 without Config.PartitionedReceive) claim their batches inside the unit
// of work that applies them, as a single consumer or partitioned consumers
// do. Off: in the runs of docs/benchmarks.md ("Claiming inside the unit of
// work") it was not faster than the lease for the zero Config.
var ClaimInTurn atomic.Bool

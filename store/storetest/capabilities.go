package storetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// capability is an optional interface of a store and the cases that check
// it. Run finds by type assertion whether the store under test implements
// it, and runs its cases or skips them with the reason.
type capability struct {
	// name names the subtest that holds the cases.
	name string
	// ifaces are the interfaces the cases need; the first is the capability
	// itself, the rest are what its cases also use. A store that
	// implements the first must implement the rest.
	ifaces []iface
	cases  []testCase
}

// iface is one interface of package store, by name and by type assertion.
type iface struct {
	name string
	has  func(store.Store) bool
}

// implements returns an iface whose has asserts s.(T).
func implements[T any](name string) iface {
	return iface{name: name, has: func(s store.Store) bool { _, ok := s.(T); return ok }}
}

var (
	instanceQuerier    = implements[readmodel.InstanceQuerier]("readmodel.InstanceQuerier")
	timerQuerier       = implements[readmodel.TimerQuerier]("readmodel.TimerQuerier")
	queryCounter       = implements[readmodel.QueryCounter]("readmodel.QueryCounter")
	deadLetterQuerier  = implements[readmodel.DeadLetterQuerier]("readmodel.DeadLetterQuerier")
	deadLetterReplayer = implements[store.DeadLetterReplayer]("store.DeadLetterReplayer")
	deadLetterGrouper  = implements[readmodel.DeadLetterGrouper]("readmodel.DeadLetterGrouper")
	deadLetterArchiver = implements[readmodel.DeadLetterArchiver]("readmodel.DeadLetterArchiver")
	replicaCounter     = implements[readmodel.ReplicaCounter]("readmodel.ReplicaCounter")
	replicaRegistry    = implements[store.ReplicaRegistry]("store.ReplicaRegistry")
)

// deadLetterTypeQuerier is a readmodel.DeadLetterTypeQuerier that selects
// by message type: one whose SelectsMessageType reports false does not.
var deadLetterTypeQuerier = iface{
	name: "readmodel.DeadLetterTypeQuerier selecting by message type",
	has:  readmodel.SelectsMessageType,
}

// capabilities lists the optional interfaces whose cases Run runs when the
// store implements them, in the order of the subtests. It is a function so
// that it reads the case lists after the init functions that extend them.
func capabilities() []capability {
	return []capability{
		{"InstanceQuerier", []iface{instanceQuerier}, querierCases},
		{"TimerQuerier", []iface{timerQuerier}, timerQuerierCases},
		{"QueryCounter", []iface{queryCounter, instanceQuerier}, queryCounterCases},
		{"DeadLetterQuerier", []iface{deadLetterQuerier}, deadLetterQuerierCases},
		{"DeadLetterReplayer", []iface{deadLetterReplayer}, deadLetterReplayerCases},
		{"DeadLetterTriage", []iface{deadLetterGrouper, deadLetterArchiver, deadLetterQuerier}, deadLetterTriageCases},
		{"DeadLetterState", []iface{deadLetterTypeQuerier, deadLetterReplayer, deadLetterGrouper, deadLetterArchiver}, deadLetterStateCases},
		{"ReplicaCounter", []iface{replicaCounter, replicaRegistry}, replicaCounterCases},
		{"Flow", []iface{limiterIface}, flowCases},
		{"Definitions", []iface{definitionStore, replicaRegistry}, definitionCases},
		{"StateMigrator", []iface{stateMigrator}, stateMigratorCases},
	}
}

// skipReason is why c's cases do not run on s ("" when they run), or an
// error when s implements c but not all that c's cases need.
func (c capability) skipReason(s store.Store) (string, error) {
	if !c.ifaces[0].has(s) {
		return fmt.Sprintf("%T does not implement %s", s, c.ifaces[0].name), nil
	}
	var missing []string
	for _, i := range c.ifaces[1:] {
		if !i.has(s) {
			missing = append(missing, i.name)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%T implements %s but not %s, which its cases also need", s, c.ifaces[0].name, strings.Join(missing, " and "))
	}
	return "", nil
}

// runCapabilities runs, for each capability the store probe implements,
// its cases as parallel subtests of a subtest named after it, each with a
// fresh store from open; it skips the others with the reason.
func runCapabilities(t *testing.T, probe store.Store, open func(t *testing.T) store.Store) {
	t.Helper()
	for _, c := range capabilities() {
		reason, err := c.skipReason(probe)
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			switch {
			case err != nil:
				t.Fatal(err)
			case reason != "":
				t.Skip(reason)
			}
			for _, tc := range c.cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, open(t))
				})
			}
		})
	}
}

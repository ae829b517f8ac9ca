package idem_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// Beside a broker (here the in-memory transport, with memstore keeping
// the limits), the engine admits through the store after each receive:
// the cap binds per tenant, failures release their slots, and none leaks
// (enginetest.FlowBeside).
func TestFlowBesideABroker(t *testing.T) {
	enginetest.FlowBeside(t, memstore.New(nil), memtransport.New(&memtransport.Config{Lease: time.Second}))
}

// A cap raised at runtime reaches a delivery waiting in the gate, though
// nothing was released (enginetest.FlowChangeBeside).
func TestFlowChangeBesideABroker(t *testing.T) {
	enginetest.FlowChangeBeside(t, memstore.New(nil), memtransport.New(&memtransport.Config{Lease: time.Second}))
}

// The admission cases that apply beside a broker, on the in-memory
// transport and store (enginetest.FlowBroker).
func TestFlowBrokerCases(t *testing.T) {
	enginetest.FlowBroker(t, func(t *testing.T) (store.Store, func() transport.Transport) {
		st := memstore.New(nil)
		bus := memtransport.New(&memtransport.Config{Lease: 500 * time.Millisecond})
		return st, func() transport.Transport { return bus }
	})
}

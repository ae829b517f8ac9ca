package idem_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// Requests and fault events on memstore; the SQL stores run the same
// scenarios in their packages.
func TestRequestsAndFaults(t *testing.T) {
	t.Parallel()
	enginetest.Requests(t, func(t *testing.T) store.Store {
		st := memstore.New(nil)
		t.Cleanup(func() { _ = st.Close() })
		return st
	})
}

// The fault of a dead-lettered request is part of the dead letter's
// commit: a commit that fails loses both, the retry writes both, and the
// sender applies the fault once.
func TestFaultCommittedWithDeadLetter(t *testing.T) {
	t.Parallel()
	authorize := saga.MessageType(enginetest.Authorize{})
	faultType := saga.FaultType(enginetest.OrdersType, authorize)
	var mu sync.Mutex
	var withDead, withFault, failed int
	hooks := &hookStore{Store: memstore.New(nil)}
	t.Cleanup(func() { _ = hooks.Store.Close() })
	hooks.beforeCommit = func(c *store.Changes) error {
		mu.Lock()
		defer mu.Unlock()
		dead := slices.ContainsFunc(c.DeadLetters, func(d store.DeadLetter) bool { return d.Envelope.Type == authorize })
		fault := slices.ContainsFunc(c.Outbox, func(o store.OutboxMessage) bool { return o.Envelope.Type == faultType })
		if dead != fault {
			t.Errorf("commit with the request's dead letter: %v, with its fault: %v", dead, fault)
		}
		if dead {
			withDead++
		}
		if fault {
			withFault++
			if failed == 0 {
				failed++
				return errors.New("injected: the database went away")
			}
		}
		return nil
	}
	b := enginetest.NewRequestBundle(t, hooks)
	b.Publish("place-1", "", enginetest.Place{OrderID: "o1", Amount: -1})
	b.WaitOrder("o1", "Failed", "fault:"+idem.ReasonMalformed)
	mu.Lock()
	defer mu.Unlock()
	if failed != 1 || withDead != 2 || withFault != 2 {
		t.Errorf("failed %d, commits with the dead letter %d, with the fault %d; want 1, 2, 2", failed, withDead, withFault)
	}
	js, err := hooks.Journal(t.Context(), store.Key{SagaType: enginetest.OrdersType, Key: "o1"})
	if err != nil || len(js) != 2 || js[1].EventType != faultType {
		t.Errorf("journal %+v (%v): want the start and one fault", js, err)
	}
}

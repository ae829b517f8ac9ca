package ledger_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/dispatch/ledger"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/sagatest"
)

func TestMachineIsComplete(t *testing.T) {
	if err := ledger.NewMachine().Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
}

// A copy of an event under another message ID (a producer that minted a new
// ID, like the incident's wall-clock keys) is recognised by its sequence
// number: no second ledger append.
func TestSameEventUnderNewIDIsIgnored(t *testing.T) {
	m := ledger.NewMachine()
	h := sagatest.New(t, m.Machine, &sagatest.Options{Copies: 2, Replicas: 2})
	pn, _ := pseudonymizer(t).Pseudonym(rawID(1))
	ev := func(seq int64, k ledger.Kind) ledger.Event { return ledger.Event{Patient: pn, Seq: seq, Kind: k} }
	h.Deliver("desk-1", ledger.MissionRequested(ev(1, ledger.Requested)))
	h.Settle()
	h.Deliver("desk-2", ledger.MissionConfirmed(ev(2, ledger.Confirmed)))
	h.Deliver("desk-2-retry-at-02:13:41.188", ledger.MissionConfirmed(ev(2, ledger.Confirmed)))
	h.Settle()
	h.AssertState(pn, m.Confirmed)
	h.Deliver("desk-3", ledger.MissionLaunched(ev(3, ledger.Launched)))
	h.Deliver("desk-3-retry", ledger.MissionLaunched(ev(3, ledger.Launched)))
	h.Deliver("desk-2-late", ledger.MissionConfirmed(ev(2, ledger.Confirmed)))
	h.Settle()
	h.AssertState(pn, m.Idle)
	h.AssertEmittedCount(ledger.TypeLedgerAppend, 3)
	h.AssertDeadLetters()
	if _, data, _ := h.State(pn); data != (ledger.Patient{LastSeq: 3, Mission: 1, Kinds: "RCL"}) {
		t.Errorf("saga data %+v, want last seq 3 of mission 1", data)
	}
	// Stale copies are ignored, not applied: three transitions in all.
	if v := h.Instance(pn).Version; v != 3 {
		t.Errorf("saga version %d, want 3: a stale copy was applied as a transition", v)
	}
	if s := h.Stats(); s.Ignored == 0 {
		t.Errorf("stats %+v: want the stale copies counted as ignored", s)
	}
}

// An illegal transition is dead-lettered and never reaches the ledger.
func TestIllegalTransitionIsDeadLettered(t *testing.T) {
	m := ledger.NewMachine()
	h := sagatest.New(t, m.Machine, nil)
	pn, _ := pseudonymizer(t).Pseudonym(rawID(1))
	h.Deliver("desk-1", ledger.MissionRequested{Patient: pn, Seq: 1, Kind: ledger.Requested})
	h.Deliver("desk-2", ledger.MissionLaunched{Patient: pn, Seq: 2, Kind: ledger.Launched})
	h.Settle()
	h.AssertState(pn, m.Requested)
	h.AssertEmittedCount(ledger.TypeLedgerAppend, 1)
	if dl := h.DeadLetters(); len(dl) != 1 {
		t.Fatalf("dead letters %v, want the LAUNCHED", dl)
	}
}

// An event at a sequence number that holds another accepted event (a
// CANCELLED at the seq of the LAUNCHED) is not a copy: it is dead-lettered
// as a conflict, while a copy of the accepted event is still ignored.
func TestConflictingEventAtAcceptedSeqIsRefused(t *testing.T) {
	m := ledger.NewMachine()
	h := sagatest.New(t, m.Machine, nil)
	pn, _ := pseudonymizer(t).Pseudonym(rawID(1))
	ev := func(seq int64, k ledger.Kind) ledger.Event { return ledger.Event{Patient: pn, Seq: seq, Kind: k} }
	h.Deliver("desk-1", ledger.MissionRequested(ev(1, ledger.Requested)))
	h.Settle()
	h.Deliver("desk-2", ledger.MissionConfirmed(ev(2, ledger.Confirmed)))
	h.Settle()
	h.Deliver("desk-3", ledger.MissionLaunched(ev(3, ledger.Launched)))
	h.Settle()
	h.Deliver("desk-3-cancel", ledger.MissionCancelled(ev(3, ledger.Cancelled)))
	h.Deliver("desk-3-copy", ledger.MissionLaunched(ev(3, ledger.Launched)))
	h.Settle()
	h.AssertState(pn, m.Idle)
	h.AssertEmittedCount(ledger.TypeLedgerAppend, 3)
	dl := h.DeadLetters()
	if len(dl) != 1 || dl[0].Envelope.ID != "desk-3-cancel" || dl[0].Reason != idem.ReasonPermanent ||
		!strings.Contains(dl[0].Error, ledger.ErrConflict.Error()) {
		t.Fatalf("dead letters %+v, want the CANCELLED at seq 3 as a conflict", dl)
	}
}

// A patient stored before the saga recorded each event's kind (LastSeq set,
// Kinds empty) still treats an event at or below LastSeq as a copy.
func TestStateWithoutKindsTreatsOldSeqAsCopy(t *testing.T) {
	m := ledger.NewMachine()
	pn, _ := pseudonymizer(t).Pseudonym(rawID(1))
	msg := ledger.MissionConfirmed{Patient: pn, Seq: 2, Kind: ledger.Confirmed}
	res, err := m.Apply(saga.Input{
		Msg: msg, MsgType: saga.MessageType(msg), Key: pn, MessageID: "late-copy", Now: time.Now(),
		Exists: true, State: m.Idle, Data: []byte(`{"last_seq":3,"mission":1}`), SchemaVersion: m.SchemaVersion(),
	})
	if err != nil || res.Outcome != saga.Ignored {
		t.Fatalf("Apply: outcome %v, error %v; want the copy ignored", res.Outcome, err)
	}
}

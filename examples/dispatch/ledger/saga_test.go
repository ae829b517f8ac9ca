package ledger_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/dispatch/ledger"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/sagatest"
)

func TestMachineIsComplete(t *testing.T) {
	if err := ledger.NewMachine(ledger.Appender{}).Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
}

// The ledger row is written in the saga's transaction: on a store that
// shares none with its handlers (memstore), an accepted event is
// dead-lettered rather than applied without its row.
func TestSagaNeedsATransaction(t *testing.T) {
	m := ledger.NewMachine(ledger.Appender{})
	h := sagatest.New(t, m.Machine, nil)
	pn, _ := pseudonymizer(t).Pseudonym(rawID(1))
	h.Deliver("desk-1", ledger.MissionRequested{Patient: pn, Seq: 1, Kind: ledger.Requested})
	h.Settle()
	h.AssertNoSaga(pn)
	dl := h.DeadLetters()
	if len(dl) != 1 || dl[0].Reason != idem.ReasonPermanent || !strings.Contains(dl[0].Error, ledger.ErrNoTransaction.Error()) {
		t.Fatalf("dead letters %+v, want the REQUESTED, naming ErrNoTransaction", dl)
	}
}

// A copy of an accepted event writes no second row: the same message again
// stops at Idem's inbox, a copy under another message ID (a producer that
// minted a new ID, like the incident's wall-clock keys) at the saga's
// sequence check, before the insert. Neither reaches the ledger's unique
// constraint: nothing is retried.
func TestCopiesAppendOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		w := startWriter(t, b, ledger.WriterConfig{})
		pn, _ := pseudonymizer(t).Pseudonym(rawID(1))
		req := ledger.Event{Patient: pn, Seq: 1, Kind: ledger.Requested}
		conf := ledger.Event{Patient: pn, Seq: 2, Kind: ledger.Confirmed}
		mustApply(t, w, req)
		mustApply(t, w, conf)

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		env := envelope(t, conf)
		if err := w.Engine().Publish(ctx, env); err != nil { // delivered again
			t.Fatal(err)
		}
		env.ID = "desk-2-retry-at-02:13:41.188"
		r, err := apply(t, w, env)
		if err != nil || r.Duplicate || r.Version != 2 || r.State != "Confirmed" {
			t.Fatalf("copy under a new ID: %+v, %v; want it ignored by the saga at version 2", r, err)
		}
		waitStats(ctx, t, w, func(s idem.Stats) bool { return s.Duplicates >= 1 })

		d := openDB(t, b)
		rows, notes := ledgerOf(t, d, pn)
		if kinds(rows) != "1:REQUESTED 2:CONFIRMED" || len(notes) != 2 {
			t.Fatalf("ledger %q with %d notifications, want seq 1 and 2 once each", kinds(rows), len(notes))
		}
		st := w.Engine().Stats()
		if st.Retries != 0 || st.DeadLettered != 0 || st.Ignored != 1 || st.Duplicates != 1 {
			t.Errorf("stats %+v: want one duplicate, one ignored copy, no retry and no dead letter", st)
		}
	})
}

// waitStats polls the engine's counters (they change on its goroutines)
// until ok holds.
func waitStats(ctx context.Context, t *testing.T, w *ledger.Writer, ok func(idem.Stats) bool) {
	t.Helper()
	for st := w.Engine().Stats(); !ok(st); st = w.Engine().Stats() {
		select {
		case <-ctx.Done():
			t.Fatalf("stats %+v: %v", st, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// An illegal transition and an event at a sequence number that holds
// another accepted event (a CANCELLED at the seq of the LAUNCHED) are
// dead-lettered and never reach the ledger; a copy of the accepted event is
// still ignored.
func TestRefusedEventsAppendNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		w := startWriter(t, b, ledger.WriterConfig{})
		pn, _ := pseudonymizer(t).Pseudonym(rawID(1))
		ev := func(seq int64, k ledger.Kind) ledger.Event { return ledger.Event{Patient: pn, Seq: seq, Kind: k} }
		mustApply(t, w, ev(1, ledger.Requested))
		if _, err := apply(t, w, envelope(t, ev(2, ledger.Launched))); !errors.Is(err, idem.ErrDeadLettered) {
			t.Fatalf("LAUNCHED after REQUESTED: %v, want dead-lettered", err)
		}
		mustApply(t, w, ev(2, ledger.Confirmed))
		mustApply(t, w, ev(3, ledger.Launched))
		_, err := apply(t, w, envelope(t, ev(3, ledger.Cancelled)))
		if !errors.Is(err, idem.ErrDeadLettered) || !strings.Contains(err.Error(), ledger.ErrConflict.Error()) {
			t.Fatalf("CANCELLED at the seq of the LAUNCHED: %v, want dead-lettered as a conflict", err)
		}
		copyEnv := envelope(t, ev(3, ledger.Launched))
		copyEnv.ID = "desk-3-retry"
		if r, err := apply(t, w, copyEnv); err != nil || r.Version != 3 {
			t.Fatalf("copy of the LAUNCHED: %+v, %v; want it ignored at version 3", r, err)
		}

		rows, notes := ledgerOf(t, openDB(t, b), pn)
		if kinds(rows) != "1:REQUESTED 2:CONFIRMED 3:LAUNCHED" || len(notes) != 3 {
			t.Fatalf("ledger %q with %d notifications, want REQUESTED, CONFIRMED, LAUNCHED once each", kinds(rows), len(notes))
		}
		snap, err := w.Patient(context.Background(), pn)
		if err != nil || snap == nil || snap.Data != (ledger.Patient{LastSeq: 3, Mission: 1, Kinds: "RCL"}) || snap.Instance.State != "Idle" {
			t.Fatalf("saga %+v, %v; want Idle at seq 3 of mission 1", snap, err)
		}
	})
}

// errFault is the fault the tests inject after the ledger insert.
var errFault = errors.New("injected fault after the ledger insert")

// The ledger row and its notification commit with the state change or not
// at all. A fault after the inserts undoes them with the transition: a
// transient one is retried, and the retry finds neither the rows nor the
// state change of the failed attempt committed, and writes the rows once; a
// permanent one dead-letters the event with nothing written, and its
// replay writes the rows once.
func TestLedgerRowCommitsWithTheTransition(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := openDB(t, b)
		pn, _ := pseudonymizer(t).Pseudonym(rawID(1))
		ev := func(seq int64, k ledger.Kind) ledger.Event { return ledger.Event{Patient: pn, Seq: seq, Kind: k} }
		conf, launch := ev(2, ledger.Confirmed), ev(3, ledger.Launched)

		// What the fault saw when conf was retried, read outside the
		// saga's transaction.
		var (
			mu                 sync.Mutex
			calls              = map[string]int{}
			permanent          = true
			retryRows, retryNS int
			retrySeq           int64 = -1
			retryErr           error
			w                  *ledger.Writer
		)
		fault := func(ctx context.Context, e ledger.Event) error {
			mu.Lock()
			defer mu.Unlock()
			calls[e.ID()]++
			switch {
			case e.ID() == conf.ID() && calls[e.ID()] == 1:
				return errFault // transient: retried
			case e.ID() == conf.ID() && calls[e.ID()] == 2:
				retryRows, retryNS, retryErr = count(ctx, d, conf)
				snap, err := w.Patient(ctx, pn)
				if err == nil && snap != nil {
					retrySeq = snap.Data.LastSeq
				}
				retryErr = errors.Join(retryErr, err)
			case e.ID() == launch.ID() && permanent:
				return idem.Permanent(errFault)
			}
			return nil
		}
		// A short lease, so that a retry that cannot succeed is
		// dead-lettered within seconds (OpenWriter sizes the attempts to
		// twice the lease).
		wr := startWriter(t, b, ledger.WriterConfig{AfterAppend: fault, Lease: 2 * time.Second})
		mu.Lock()
		w = wr // the fault reads it on the engine's goroutines
		mu.Unlock()

		mustApply(t, wr, ev(1, ledger.Requested))
		mustApply(t, wr, conf)
		mu.Lock()
		if calls[conf.ID()] < 2 || retryErr != nil || retryRows != 0 || retryNS != 0 || retrySeq != 1 {
			t.Errorf("retry of the CONFIRMED (attempt %d) found %d rows, %d notifications and the saga at seq %d committed (%v); want none, none and seq 1",
				calls[conf.ID()], retryRows, retryNS, retrySeq, retryErr)
		}
		mu.Unlock()
		if rows, notes := countEvent(t, d, conf); rows != 1 || notes != 1 {
			t.Fatalf("CONFIRMED: %d rows and %d notifications after its retry, want 1 and 1", rows, notes)
		}

		env := envelope(t, launch)
		if _, err := apply(t, wr, env); !errors.Is(err, idem.ErrDeadLettered) || !strings.Contains(err.Error(), errFault.Error()) {
			t.Fatalf("LAUNCHED with a permanent fault: %v, want dead-lettered with the fault", err)
		}
		if rows, notes := countEvent(t, d, launch); rows != 0 || notes != 0 {
			t.Fatalf("dead-lettered LAUNCHED left %d rows and %d notifications, want none", rows, notes)
		}
		ctx := context.Background()
		if snap, err := wr.Patient(ctx, pn); err != nil || snap.Data.LastSeq != 2 || snap.Instance.State != "Confirmed" {
			t.Fatalf("saga after the dead-lettered LAUNCHED: %+v, %v; want Confirmed at seq 2", snap, err)
		}

		mu.Lock()
		permanent = false
		mu.Unlock()
		if err := wr.Engine().ReplayDeadLetter(ctx, env.ID); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := wr.Wait(wctx, []ledger.Event{launch}); err != nil {
			t.Fatal(err)
		}
		if rows, notes := countEvent(t, d, launch); rows != 1 || notes != 1 {
			t.Fatalf("replayed LAUNCHED: %d rows and %d notifications, want 1 and 1", rows, notes)
		}
		if snap, err := wr.Patient(ctx, pn); err != nil || snap.Data != (ledger.Patient{LastSeq: 3, Mission: 1, Kinds: "RCL"}) {
			t.Fatalf("saga after the replay: %+v, %v; want seq 3", snap, err)
		}
		if code, rep := validate(t, b); code != 0 || rep.Rows != 3 || rep.Notifications != 3 {
			t.Fatalf("validate exit %d: %+v", code, rep)
		}
	})
}

// A patient stored before the saga recorded each event's kind (LastSeq set,
// Kinds empty) still treats an event at or below LastSeq as a copy.
func TestStateWithoutKindsTreatsOldSeqAsCopy(t *testing.T) {
	m := ledger.NewMachine(ledger.Appender{})
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

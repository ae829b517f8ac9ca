package ingest_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/ingestor/ingest"
	"github.com/idemhq/idem/saga"
)

// Both machines are complete: every state handles or ignores every event,
// so the engine does not warn at Register ("saga machine is incomplete").
func TestMachinesAreComplete(t *testing.T) {
	for _, m := range []interface {
		Name() string
		Validate() error
	}{ingest.JobMachine(), ingest.ChunkMachine(nil)} {
		if err := m.Validate(); err != nil {
			t.Errorf("%s: %v", m.Name(), err)
		}
	}
}

// Every (state, event) pair of the job machine either moves along an
// enumerated transition, stays put (ignored), or is refused with
// saga.ErrUnhandled; no other transition can happen.
func TestJobTransitionsAreEnumerated(t *testing.T) {
	m := ingest.JobMachine()
	job := ingest.Job{ID: "j", Lines: 2, ChunkSize: 1, Chunks: []ingest.ChunkState{
		{Index: 0, Lines: 1, Status: ingest.StatusImported, Attempt: 1, Reports: 1},
		{Index: 1, Lines: 1, Status: ingest.StatusPending, Attempt: 1},
	}}
	data, _ := json.Marshal(job)
	good := string(makeCSV(2, "t", nil))
	events := []any{
		ingest.ImportRequested{Job: "j", Supplier: "ACME", Format: ingest.FormatCSV, Content: []byte(good), ChunkSize: 1},
		ingest.ImportRequested{Job: "j", Supplier: "ACME", Format: ingest.FormatCSV, Content: []byte("advice_id\n"), ChunkSize: 1},
		ingest.ChunkDone{Job: "j", Chunk: 1, Attempt: 1, OK: true, Lines: 1},
		ingest.ChunkDone{Job: "j", Chunk: 1, Attempt: 1, OK: false, Lines: 1, Problems: []ingest.Problem{{Line: 3, Field: "depot"}}},
		ingest.RequeueRequested{Job: "j", Generation: 1},
	}
	states := append([]saga.State{saga.Initial}, m.States()...)
	for _, from := range states {
		for _, ev := range events {
			in := saga.Input{Exists: from != saga.Initial, State: from, Data: data, Msg: ev, MsgType: saga.MessageType(ev), Key: "j", MessageID: "m", Now: time.Now()}
			res, err := m.Apply(in)
			switch {
			case err != nil:
				if !errors.Is(err, saga.ErrUnhandled) && !errors.Is(err, ingest.ErrNotRequeueable) {
					t.Errorf("%s + %T: unexpected error %v", from, ev, err)
				}
				if m.IsFinal(from) {
					t.Errorf("%s + %T: a final state must ignore, not refuse", from, ev)
				}
			case res.Outcome == saga.Applied && !slices.Contains(ingest.Transitions[from], res.To):
				t.Errorf("%s + %T moved to %s, which Transitions does not allow", from, ev, res.To)
			}
		}
	}
	// The refusals the API relies on: permanent, so a requeue that got
	// past Requeue's check is dead-lettered with the reason, not retried.
	for _, from := range []saga.State{ingest.Queued, ingest.Processing} {
		_, err := m.Apply(saga.Input{Exists: true, State: from, Data: data, Msg: events[4], MsgType: saga.MessageType(events[4]), Key: "j", MessageID: "m"})
		if !errors.Is(err, ingest.ErrNotRequeueable) || !idem.IsPermanent(err) {
			t.Errorf("requeue in %s: got %v, want a permanent ErrNotRequeueable", from, err)
		}
	}
	// A file that bypassed the API's validation is rejected by the saga.
	res, err := m.Apply(saga.Input{Msg: events[1], MsgType: saga.MessageType(events[1]), Key: "j", MessageID: "m"})
	if err != nil || res.To != ingest.Rejected || len(res.Emitted) != 0 {
		t.Fatalf("invalid file: got %s, %d emitted, %v; want Rejected and nothing emitted", res.To, len(res.Emitted), err)
	}
	res, err = m.Apply(saga.Input{Msg: events[0], MsgType: saga.MessageType(events[0]), Key: "j", MessageID: "m"})
	if err != nil || res.To != ingest.Queued || len(res.Emitted) != 2 {
		t.Fatalf("valid file: got %s, %d emitted, %v; want Queued and 2 chunks", res.To, len(res.Emitted), err)
	}
}

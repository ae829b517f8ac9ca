package searchimport_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/examples/searchimport"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/sagatest"
	"github.com/idemhq/idem/store"
)

var parseCmd = saga.MessageType(searchimport.StartParsingReferenceFile{})

func meta(id string, files ...string) searchimport.Metadata {
	return searchimport.Metadata{SearchID: id, ProjectID: "p-1", SearchName: "search " + id, ReferenceFiles: files}
}

func TestMachineIsComplete(t *testing.T) {
	if err := searchimport.New(searchimport.Config{}).Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
}

func TestHappyPath(t *testing.T) {
	m := searchimport.New(searchimport.Config{})
	h := sagatest.New(t, m.Machine, nil)

	h.Deliver("api-1", searchimport.SearchUploadStarted{Metadata: meta("s-1", "a.ris", "b.ris")})
	h.Settle()
	h.AssertState("s-1", m.Uploading)
	if in := h.Instance("s-1"); in.Timers[searchimport.TimeoutName] == "" {
		t.Fatalf("upload timeout not scheduled: timers %v", in.Timers)
	}

	h.Deliver("s3-1", searchimport.SearchUploadSaved{Metadata: meta("s-1", "a.ris", "b.ris")})
	h.Settle()
	h.AssertState("s-1", m.Uploaded)
	h.AssertEmittedCount(parseCmd, 2)
	if in := h.Instance("s-1"); len(in.Timers) != 0 {
		t.Fatalf("timeout still scheduled after upload saved: %v", in.Timers)
	}

	h.Deliver("parser-a", searchimport.ReferenceFileParsingCompleted{SearchID: "s-1", File: "a.ris"})
	h.Settle()
	h.AssertState("s-1", m.Parsing)
	h.Deliver("parser-b", searchimport.ReferenceFileParsingCompleted{SearchID: "s-1", File: "b.ris"})
	h.Settle()
	h.AssertState("s-1", m.Completed)
	if in := h.Instance("s-1"); in.FinishedAt.IsZero() {
		t.Fatal("completed saga has no FinishedAt")
	}
	h.AssertDeadLetters()
	// Nothing should be left to fire.
	h.Advance(2 * time.Hour)
	h.AssertState("s-1", m.Completed)
}

// The reference incident: two SearchUploadSaved for one search arrive at
// the same time on different replicas. Whether storage repeated the same
// notification (same ID) or the publisher minted a new ID, exactly one set
// of parse commands leaves and nothing is dead-lettered.
func TestConcurrentDuplicateUploadSaved(t *testing.T) {
	for _, sameID := range []bool{true, false} {
		t.Run(fmt.Sprintf("sameID=%v", sameID), func(t *testing.T) {
			m := searchimport.New(searchimport.Config{})
			h := sagatest.New(t, m.Machine, &sagatest.Options{Replicas: 3})
			const searches = 50
			for i := range searches {
				id := fmt.Sprintf("s-%d", i)
				for c := range 3 {
					msgID := "s3-" + id
					if !sameID {
						msgID = fmt.Sprintf("s3-%s-copy%d", id, c)
					}
					h.DeliverN(msgID, searchimport.SearchUploadSaved{Metadata: meta(id, "f.ris")}, 1)
				}
			}
			h.Settle()
			for i := range searches {
				h.AssertState(fmt.Sprintf("s-%d", i), m.Uploaded)
			}
			h.AssertEmittedCount(parseCmd, searches)
			h.AssertDeadLetters()
			st := h.Stats()
			if sameID && st.Duplicates+st.Conflicts == 0 {
				t.Errorf("stats %+v: want duplicates or conflicts recorded for same-ID copies", st)
			}
			if got := st.Applied; got != searches {
				t.Errorf("applied %d transitions, want %d (one per search)", got, searches)
			}
		})
	}
}

func driveTo(t *testing.T, h *sagatest.Harness[searchimport.Search], m *searchimport.Machine, id string, final saga.State) {
	t.Helper()
	h.Deliver("api-"+id, searchimport.SearchUploadStarted{Metadata: meta(id, "a.ris")})
	h.Deliver("s3-"+id, searchimport.SearchUploadSaved{Metadata: meta(id, "a.ris")})
	h.Settle()
	if final == m.Completed {
		h.Deliver("parsed-"+id, searchimport.ReferenceFileParsingCompleted{SearchID: id, File: "a.ris"})
	} else {
		h.Deliver("faulted-"+id, searchimport.ReferenceFileFaulted{SearchID: id, File: "a.ris", Error: "bad encoding"})
	}
	h.Settle()
	h.AssertState(id, final)
}

func TestAllEventsIgnoredInFinalStates(t *testing.T) {
	m := searchimport.New(searchimport.Config{})
	for _, final := range []saga.State{m.Completed, m.Error} {
		t.Run(string(final), func(t *testing.T) {
			h := sagatest.New(t, m.Machine, &sagatest.Options{Copies: 2})
			driveTo(t, h, m, "s-1", final)
			before := h.Instance("s-1")
			emitted := len(h.Emitted())
			ignored := h.Stats().Ignored
			events := []any{
				searchimport.SearchUploadStarted{Metadata: meta("s-1", "a.ris")},
				searchimport.SearchUploadSaved{Metadata: meta("s-1", "a.ris")},
				searchimport.ReferenceFileParsingCompleted{SearchID: "s-1", File: "a.ris"},
				searchimport.ReferenceFileFaulted{SearchID: "s-1", File: "a.ris", Error: "x"},
				searchimport.StartParsingFaulted{SearchID: "s-1", Error: "x"},
				searchimport.UploadTimeout{SearchID: "s-1"},
			}
			for i, ev := range events {
				h.Deliver(fmt.Sprintf("late-%d", i), ev)
			}
			h.Settle()
			after := h.Instance("s-1")
			if after.State != before.State || string(after.Data) != string(before.Data) || after.Version != before.Version {
				t.Errorf("saga changed: before %s v%d %s, after %s v%d %s", before.State, before.Version, before.Data, after.State, after.Version, after.Data)
			}
			if got := len(h.Emitted()); got != emitted {
				t.Errorf("emitted %d messages after final state, want 0", got-emitted)
			}
			if got := h.Stats().Ignored - ignored; got != int64(len(events)) {
				t.Errorf("ignored %d events, want %d", got, len(events))
			}
			h.AssertDeadLetters()
		})
	}
}

func TestLateDuplicateAfterCompletion(t *testing.T) {
	m := searchimport.New(searchimport.Config{})
	h := sagatest.New(t, m.Machine, nil)
	driveTo(t, h, m, "s-1", m.Completed)
	dups := h.Stats().Duplicates
	// The very same notification again, days later.
	h.Deliver("s3-s-1", searchimport.SearchUploadSaved{Metadata: meta("s-1", "a.ris")})
	h.Settle()
	h.AssertState("s-1", m.Completed)
	h.AssertEmittedCount(parseCmd, 1)
	if got := h.Stats().Duplicates - dups; got != 1 {
		t.Errorf("duplicates skipped: got %d, want 1", got)
	}
}

func TestUploadTimeoutAfterSagaMovedOnIsHarmless(t *testing.T) {
	m := searchimport.New(searchimport.Config{UploadTimeout: time.Hour})
	h := sagatest.New(t, m.Machine, nil)
	h.Deliver("api-1", searchimport.SearchUploadStarted{Metadata: meta("s-1", "a.ris")})
	h.Settle()
	timers, err := h.Store.ListTimers(context.Background(), &store.ListParams{Limit: 10})
	if err != nil || len(timers) != 1 {
		t.Fatalf("timers: got %v, %v; want one scheduled", timers, err)
	}
	inFlight := timers[0].Envelope // as if the timer had fired just before the upload was saved

	h.Deliver("s3-1", searchimport.SearchUploadSaved{Metadata: meta("s-1", "a.ris")})
	h.Settle()
	h.AssertState("s-1", m.Uploaded)
	h.DeliverEnvelope(inFlight, 2)
	h.Settle()
	h.Advance(2 * time.Hour) // and the cancelled timer never fires
	h.AssertState("s-1", m.Uploaded)
	// The first copy is dropped as stale and recorded in the inbox; the
	// second is then a plain duplicate.
	if st := h.Stats(); st.StaleTimers != 1 || st.Duplicates != 1 || st.TimersFired != 0 {
		t.Errorf("stale timers %d, duplicates %d, fired %d; want 1, 1, 0", st.StaleTimers, st.Duplicates, st.TimersFired)
	}
	h.AssertDeadLetters()
}

func TestUploadTimeoutFiresInUploading(t *testing.T) {
	m := searchimport.New(searchimport.Config{UploadTimeout: time.Hour})
	h := sagatest.New(t, m.Machine, nil)
	h.Deliver("api-1", searchimport.SearchUploadStarted{Metadata: meta("s-1", "a.ris")})
	h.Settle()
	h.Advance(59 * time.Minute)
	h.AssertState("s-1", m.Uploading)
	h.Advance(2 * time.Minute)
	h.AssertState("s-1", m.Error)
	_, data, _ := h.State("s-1")
	if data.Error == "" {
		t.Error("timed-out saga has no error text")
	}
	// The storage notification arriving after the timeout is ignored.
	h.Deliver("s3-1", searchimport.SearchUploadSaved{Metadata: meta("s-1", "a.ris")})
	h.Settle()
	h.AssertState("s-1", m.Error)
	h.AssertEmittedCount(parseCmd, 0)
}

func TestMissingReferenceFilesOnUploadSavedIsFatal(t *testing.T) {
	m := searchimport.New(searchimport.Config{})
	h := sagatest.New(t, m.Machine, nil)
	h.Deliver("api-1", searchimport.SearchUploadStarted{Metadata: meta("s-1", "a.ris")})
	h.Deliver("s3-1", searchimport.SearchUploadSaved{Metadata: meta("s-1")})
	h.Settle()
	h.AssertState("s-1", m.Error)
	h.AssertEmittedCount(parseCmd, 0)
	if in := h.Instance("s-1"); len(in.Timers) != 0 {
		t.Errorf("timeout still scheduled in Error: %v", in.Timers)
	}
}

func TestLateUploadStartedWithoutMetadataIsOnlyLogged(t *testing.T) {
	m := searchimport.New(searchimport.Config{})
	h := sagatest.New(t, m.Machine, nil)
	h.Deliver("s3-1", searchimport.SearchUploadSaved{Metadata: meta("s-1", "a.ris")})
	h.Settle()
	h.Deliver("api-1", searchimport.SearchUploadStarted{Metadata: searchimport.Metadata{SearchID: "s-1"}})
	h.Settle()
	h.AssertState("s-1", m.Uploaded)
	_, data, _ := h.State("s-1")
	if len(data.ReferenceFiles) != 1 || data.ProjectID != "p-1" {
		t.Errorf("metadata lost: %+v", data)
	}
	h.AssertDeadLetters()
}

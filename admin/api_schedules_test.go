package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

func saveSchedules(t *testing.T, st store.Scheduler, names ...string) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, n := range names {
		s := &store.Schedule{Name: n, Spec: "@every 1h0m0s", Missed: store.MissedSkip, Grace: time.Minute,
			Envelope: transport.Envelope{Type: "report.Due", Body: []byte(`{}`)}, NextDue: now.Add(time.Hour), UpdatedAt: now}
		if err := st.SaveSchedule(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAPISchedules(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	saveSchedules(t, b.st, "nightly", "hourly", "<script>x</script>")

	var list admin.ScheduleList
	b.getJSON(t, "/api/schedules?limit=2", &list)
	if len(list.Schedules) != 2 || list.Schedules[0].Name != "<script>x</script>" || list.Next != "hourly" {
		t.Fatalf("first page: %+v, want 2 schedules by name and a cursor", list)
	}
	if s := list.Schedules[1]; s.Spec != "@every 1h0m0s" || s.Missed != store.MissedSkip || s.Grace != "1m0s" || s.Message != "report.Due" || s.Paused {
		t.Errorf("hourly: %+v", s)
	}
	b.getJSON(t, "/api/schedules?after=hourly", &list)
	if len(list.Schedules) != 1 || list.Schedules[0].Name != "nightly" {
		t.Errorf("second page: %+v, want nightly", list)
	}

	if code, body := b.do(t, http.MethodPost, "/api/schedules/nightly/pause", ""); code != http.StatusOK || !strings.Contains(body, `"paused":"nightly"`) {
		t.Errorf("pause: %d %s", code, body)
	}
	if got, err := b.st.GetSchedule(context.Background(), "nightly"); err != nil || !got.Paused {
		t.Errorf("after pause: %+v %v, want paused", got, err)
	}
	if code, body := b.do(t, http.MethodPost, "/api/schedules/nightly/resume", ""); code != http.StatusOK || !strings.Contains(body, `"resumed":"nightly"`) {
		t.Errorf("resume: %d %s", code, body)
	}
	if got, err := b.st.GetSchedule(context.Background(), "nightly"); err != nil || got.Paused {
		t.Errorf("after resume: %+v %v, want running", got, err)
	}
	if code, _ := b.do(t, http.MethodPost, "/api/schedules/nightly/pause", "", "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Errorf("cross-site pause: %d, want 403", code)
	}
	if code, _ := b.do(t, http.MethodDelete, "/api/schedules/%3Cscript%3Ex%3C%2Fscript%3E", ""); code != http.StatusOK {
		t.Errorf("delete of an escaped name: %d, want 200", code)
	}
	if code, _ := b.do(t, http.MethodDelete, "/api/schedules/nightly", ""); code != http.StatusOK {
		t.Errorf("delete: %d, want 200", code)
	}
	for path, want := range map[string]int{
		"/api/schedules/nightly/pause":  http.StatusNotFound,
		"/api/schedules/a%00b/pause":    http.StatusBadRequest,
		"/api/schedules/a%FFb/resume":   http.StatusBadRequest,
		"/api/schedules/missing/resume": http.StatusNotFound,
	} {
		if code, body := b.do(t, http.MethodPost, path, ""); code != want {
			t.Errorf("POST %s: %d %s, want %d", path, code, body, want)
		}
	}
}

func TestAPISchedulesReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, &admin.Config{ReadOnly: true})
	saveSchedules(t, b.st, "nightly")
	if code, _ := b.do(t, http.MethodPost, "/api/schedules/nightly/pause", ""); code != http.StatusForbidden {
		t.Errorf("pause on a read-only server: %d, want 403", code)
	}
	if code, _ := b.do(t, http.MethodDelete, "/api/schedules/nightly", ""); code != http.StatusForbidden {
		t.Errorf("delete on a read-only server: %d, want 403", code)
	}
}

// Fire now sends the schedule's next tick under that tick's ID and moves
// the schedule past it; a missing schedule is a 404, a read-only server
// refuses.
func TestAPIFireSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	saveSchedules(t, b.st, "nightly")
	s, err := b.st.GetSchedule(t.Context(), "nightly")
	if err != nil {
		t.Fatal(err)
	}
	code, body := b.do(t, "POST", "/api/schedules/nightly/fire", "")
	var f admin.FiredTick
	if code != http.StatusAccepted || json.Unmarshal([]byte(body), &f) != nil {
		t.Fatalf("POST fire: %d %s", code, body)
	}
	if !f.Tick.Equal(s.NextDue) || f.MessageID != idem.TickID("nightly", s.NextDue) || !f.NextDue.After(f.Tick) {
		t.Errorf("fired %+v; want the tick at %s with its TickID, next due after it", f, s.NextDue)
	}
	if after, _ := b.st.GetSchedule(t.Context(), "nightly"); !after.LastTick.Equal(s.NextDue) || !after.NextDue.Equal(f.NextDue) {
		t.Errorf("the schedule after fire: last tick %s, next due %s; want %s and %s", after.LastTick, after.NextDue, s.NextDue, f.NextDue)
	}
	// Nothing consumes report.Due here: the tick arrives as a dead letter
	// under its tick ID, which shows it was sent.
	eventually(t, "the tick to arrive", func() bool { _, err := b.st.GetDeadLetter(t.Context(), f.MessageID); return err == nil })
	if code, body := b.do(t, "POST", "/api/schedules/absent/fire", ""); code != http.StatusNotFound {
		t.Errorf("fire a missing schedule: %d %s; want 404", code, body)
	}
	ro := setup(t, &admin.Config{ReadOnly: true})
	saveSchedules(t, ro.st, "nightly")
	if code, _ := ro.do(t, "POST", "/api/schedules/nightly/fire", ""); code != http.StatusForbidden {
		t.Errorf("fire on a read-only server: %d; want 403", code)
	}
}

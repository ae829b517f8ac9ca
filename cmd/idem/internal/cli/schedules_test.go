package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
)

func TestSchedulesCommands(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	st, err := sqlitestore.Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, n := range []string{"nightly", "hourly"} {
		if err := st.SaveSchedule(context.Background(), &store.Schedule{Name: n, Spec: "0 2 * * *", Missed: store.MissedFireOnce,
			Envelope: transport.Envelope{Type: "report.Due", Body: []byte(`{}`)}, NextDue: now.Add(time.Hour), UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	url := "sqlite://" + path

	code, out, errOut := run(t, "schedules", "ls", "--store", url)
	if code != 0 || strings.Index(out, "hourly") > strings.Index(out, "nightly") || !strings.Contains(out, "0 2 * * *") || !strings.Contains(out, "active") {
		t.Fatalf("schedules ls: exit %d, got\n%s%s\nwant hourly then nightly, active", code, out, errOut)
	}
	if code, out, errOut := run(t, "schedules", "pause", "nightly", "--store", url); code != 0 || !strings.Contains(out, "paused schedule nightly") {
		t.Fatalf("schedules pause: exit %d, out %q, err %q", code, out, errOut)
	}
	if code, out, _ := run(t, "schedules", "ls", "--json", "--store", url); code != 0 || !strings.Contains(out, `"paused": true`) {
		t.Errorf("schedules ls --json after pause: exit %d, got\n%s", code, out)
	}
	if code, _, errOut := run(t, "schedules", "resume", "nightly", "--store", url); code != 0 {
		t.Errorf("schedules resume: exit %d, err %q", code, errOut)
	}
	if code, _, errOut := run(t, "schedules", "delete", "nightly", "--store", url); code != 0 {
		t.Fatalf("schedules delete: exit %d, err %q", code, errOut)
	}
	if code, _, errOut := run(t, "schedules", "delete", "nightly", "--store", url); code != 1 || !strings.Contains(errOut, "no schedule") {
		t.Errorf("schedules delete twice: exit %d, err %q; want 1 and no schedule", code, errOut)
	}
	if code, _, _ := run(t, "schedules", "pause", "a\x00b", "--store", url); code != 2 {
		t.Errorf("schedules pause of a name with NUL: exit %d, want 2", code)
	}
	if code, out, _ := run(t, "schedules", "ls", "--store", url); code != 0 || strings.Contains(out, "nightly") || !strings.Contains(out, "hourly") {
		t.Errorf("schedules ls after delete: exit %d, got\n%s", code, out)
	}
}

package admin_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
)

// The replicas' counts (the overview's live replicas, idem_replicas and
// the counts of GET /api/replicas) cover every record, not only the most
// recently started ones: a live engine started before 1,000 replicas that
// have stopped since is still counted, and so is a crashed replica it
// replaced.
func TestReplicaCountsCoverEveryRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	eventually(t, "the engine's heartbeat", func() bool { rs, err := b.st.Replicas(t.Context(), 10); return err == nil && len(rs) == 1 })
	now := time.Now().UTC()
	crashed := &store.Replica{ID: "r-crashed", Host: "h", StartedAt: now.Add(-time.Hour), Interval: 10 * time.Second, BeatAt: now.Add(-30 * time.Minute)}
	if err := b.st.Heartbeat(t.Context(), crashed); err != nil {
		t.Fatal(err)
	}
	const stopped = 1000
	for i := range stopped {
		at := now.Add(time.Minute + time.Duration(i)*time.Millisecond)
		r := &store.Replica{ID: fmt.Sprintf("r-stopped-%04d", i), Host: "h", StartedAt: at, Interval: 10 * time.Second, BeatAt: at, StoppedAt: at}
		if err := b.st.Heartbeat(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	var o admin.Overview
	b.getJSON(t, "/api/overview", &o)
	if o.LiveReplicas == nil || *o.LiveReplicas != 1 {
		t.Errorf("overview live replicas: got %v, want 1 (the engine, started before %d stopped ones)", deref(o.LiveReplicas), stopped)
	}
	var list admin.ReplicaList
	b.getJSON(t, "/api/replicas", &list)
	want := admin.ReplicaCounts{Alive: 1, Stopped: stopped, Replaced: 1}
	if list.Counts != want {
		t.Errorf("GET /api/replicas counts: got %+v, want %+v", list.Counts, want)
	}
	_, metrics := b.do(t, http.MethodGet, "/metrics", "")
	for _, line := range []string{`idem_replicas{state="alive"} 1`, `idem_replicas{state="stopped"} 1000`, `idem_replicas{state="replaced"} 1`, `idem_replicas{state="gone"} 0`} {
		if !strings.Contains(metrics, line) {
			t.Errorf("metrics: want %s in\n%s", line, grepLines(metrics, "idem_replicas"))
		}
	}
}

func deref(n *int) any {
	if n == nil {
		return nil
	}
	return *n
}

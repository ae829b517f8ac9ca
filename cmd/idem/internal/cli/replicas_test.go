package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

// idem replicas ls counts every record by state, as the console does, not
// only the rows it lists: a live replica behind 150 newer stopped ones is
// counted, a gone one it replaced is "replaced", and one gone since it
// started is gone.
func TestReplicasLsCountsEveryRecord(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	beat := func(r *store.Replica) {
		if err := st.Heartbeat(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	beat(&store.Replica{ID: "live", Host: "h", StartedAt: now.Add(-time.Hour), BeatAt: now, Interval: time.Hour})
	beat(&store.Replica{ID: "crashed", Host: "h", StartedAt: now.Add(-2 * time.Hour), BeatAt: now.Add(-90 * time.Minute), Interval: time.Second})
	beat(&store.Replica{ID: "gone", Host: "h", StartedAt: now.Add(-30 * time.Minute), BeatAt: now.Add(-10 * time.Minute), Interval: time.Second})
	for i := range 150 {
		at := now.Add(time.Duration(i) * time.Millisecond)
		beat(&store.Replica{ID: fmt.Sprintf("stopped-%03d", i), Host: "h", StartedAt: at, BeatAt: at, StoppedAt: at, Interval: time.Second})
	}
	st.Close()
	code, out, errOut := run(t, "replicas", "ls", "--store", "sqlite://"+path)
	if code != 0 || !strings.Contains(errOut, "1 alive, 150 stopped, 1 gone, 1 replaced") {
		t.Errorf("replicas ls: exit %d, stderr %q; want 1 alive, 150 stopped, 1 gone, 1 replaced (every record counted)\n%s", code, errOut, out)
	}
	code, out, errOut = run(t, "replicas", "ls", "--json", "--limit", "1000", "--store", "sqlite://"+path)
	var list admin.ReplicaList
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil {
		t.Fatalf("replicas ls --json: exit %d, %v\n%s", code, err, errOut)
	}
	if want := (admin.ReplicaCounts{Alive: 1, Stopped: 150, Gone: 1, Replaced: 1}); list.Counts != want {
		t.Errorf("replicas ls --json counts: %+v, want %+v", list.Counts, want)
	}
	for _, r := range list.Replicas {
		if want := map[string]string{"crashed": admin.ReplicaReplaced, "gone": store.ReplicaGone}[r.ID]; want != "" && r.State != want {
			t.Errorf("replica %s: state %q, want %q as the console says (replaced: its last beat is before the live one started)", r.ID, r.State, want)
		}
	}
}

package admin

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// beatAfterList is a replica registry that, the first time it is listed,
// lets the replica again beat at again: a replica that comes back between
// the console's list and its delete.
type beatAfterList struct {
	*memstore.Store
	again *store.Replica
}

func (b *beatAfterList) Replicas(ctx context.Context, limit int) ([]store.Replica, error) {
	rs, err := b.Store.Replicas(ctx, limit)
	if err == nil && b.again != nil {
		err, b.again = b.Heartbeat(ctx, b.again), nil
	}
	return rs, err
}

func replicaIDsOf(t *testing.T, rr store.ReplicaRegistry) map[string]bool {
	t.Helper()
	rs, err := rr.Replicas(t.Context(), 10*maxLimit)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]bool, len(rs))
	for _, r := range rs {
		out[r.ID] = true
	}
	return out
}

// A live replica whose record is past the list's cap (more than maxLimit
// crashed replicas started after it) keeps its record, and every record
// judged no longer running is removed.
func TestRemoveReplicasKeepsLiveReplicaPastTheCap(t *testing.T) {
	st := memstore.New(nil)
	p := &parts{caps: &capabilities{replicas: st}}
	now := time.Now()
	live := &store.Replica{ID: "live", StartedAt: now.Add(-3 * time.Hour), Interval: time.Hour, BeatAt: now.Add(-time.Minute)}
	beat(t, st, live)
	for i := range maxLimit + 1 {
		started := now.Add(-2*time.Hour + time.Duration(i)*time.Second)
		beat(t, st, &store.Replica{ID: fmt.Sprintf("crashed-%04d", i), StartedAt: started, Interval: 10 * time.Second, BeatAt: started.Add(time.Second)})
	}
	out, err := p.removeReplicas(t.Context(), now)
	if err != nil {
		t.Fatal(err)
	}
	ids := replicaIDsOf(t, st)
	if !ids["live"] {
		t.Errorf("the live replica's record was removed (%d crashed replicas started after it)", maxLimit+1)
	}
	if len(ids) != 1 || out.Removed != maxLimit+1 || out.Left != 0 {
		t.Errorf("after removal: %d records left, answer %+v; want only the live one, %d removed, 0 left", len(ids), *out, maxLimit+1)
	}
}

// With no live replica listed, a replica that beats again between the
// list and the delete keeps its record, and the answer counts it as left.
func TestRemoveReplicasKeepsOneThatBeatSinceTheList(t *testing.T) {
	st := memstore.New(nil)
	now := time.Now()
	gone := &store.Replica{ID: "gone", StartedAt: now.Add(-time.Hour), Interval: 10 * time.Second, BeatAt: now.Add(-time.Hour)}
	back := &store.Replica{ID: "back", StartedAt: now.Add(-time.Hour), Interval: 10 * time.Second, BeatAt: now.Add(-time.Hour)}
	beat(t, st, gone)
	beat(t, st, back)
	again := *back
	again.BeatAt = now.Add(-time.Second)
	p := &parts{caps: &capabilities{replicas: &beatAfterList{Store: st, again: &again}}}
	out, err := p.removeReplicas(t.Context(), now)
	if err != nil {
		t.Fatal(err)
	}
	if ids := replicaIDsOf(t, st); !ids["back"] || ids["gone"] {
		t.Errorf("after removal: records %v; want back (it beat after the list) and not gone", ids)
	}
	if out.Removed != 1 || out.Left != 1 {
		t.Errorf("answer %+v, want 1 removed, 1 left", *out)
	}
}

func beat(t *testing.T, rr store.ReplicaRegistry, r *store.Replica) {
	t.Helper()
	if err := rr.Heartbeat(t.Context(), r); err != nil {
		t.Fatal(err)
	}
}

package storetest

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// replicaCases check store.ReplicaRegistry. They run for every store that
// implements it (found by type assertion) and skip for the others.
var replicaCases = []testCase{
	{"ReplicasHeartbeatUpsert", replicasOnly(testReplicasHeartbeatUpsert)},
	{"ReplicasLateBeatIgnored", replicasOnly(testReplicasLateBeatIgnored)},
	{"ReplicasListOrderAndLimit", replicasOnly(testReplicasListOrderAndLimit)},
	{"ReplicasPrune", replicasOnly(testReplicasPrune)},
	{"ReplicasRemoveByMark", replicasOnly(testReplicasRemoveByMark)},
	{"ReplicasHostileStrings", replicasOnly(testReplicasHostileStrings)},
}

func init() { testCases = append(testCases, replicaCases...) }

func replicasOnly(fn func(t *testing.T, rr store.ReplicaRegistry)) func(t *testing.T, s store.Store) {
	return func(t *testing.T, s store.Store) {
		rr, ok := s.(store.ReplicaRegistry)
		if !ok {
			t.Skipf("%T does not implement store.ReplicaRegistry", s)
		}
		fn(t, rr)
	}
}

func newReplica(id string, started time.Time) *store.Replica {
	return &store.Replica{
		ID: id, Host: "host-" + id, Version: "v1.2.3 abcdef (go1.26)", StartedAt: started,
		Config: map[string]string{"batch_size": "64", "sagas": "order,payment"}, Lanes: 8, Consumers: 4,
		Lag: 1500 * time.Millisecond, Interval: 10 * time.Second, BeatAt: started,
		Definitions: map[string]string{"order": "fp-" + id},
	}
}

func heartbeat(t *testing.T, rr store.ReplicaRegistry, r *store.Replica) {
	t.Helper()
	if err := rr.Heartbeat(t.Context(), r); err != nil {
		t.Fatalf("heartbeat %q: got error %v, want nil", r.ID, err)
	}
}

func listReplicas(t *testing.T, rr store.ReplicaRegistry, limit int) []store.Replica {
	t.Helper()
	got, err := rr.Replicas(t.Context(), limit)
	if err != nil {
		t.Fatalf("replicas: got error %v, want nil", err)
	}
	return got
}

func replicaIDs(rs []store.Replica) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func checkReplica(t *testing.T, what string, got, want *store.Replica) {
	t.Helper()
	same := got.ID == want.ID && got.Host == want.Host && got.Version == want.Version &&
		got.StartedAt.Equal(want.StartedAt) && got.Lanes == want.Lanes && got.Consumers == want.Consumers &&
		got.LastBatchAt.Equal(want.LastBatchAt) && got.Lag == want.Lag && got.Interval == want.Interval &&
		got.BeatAt.Equal(want.BeatAt) && got.StoppedAt.Equal(want.StoppedAt) && maps.Equal(got.Config, want.Config) &&
		maps.Equal(got.Definitions, want.Definitions)
	if !same {
		t.Errorf("%s: got %+v, want %+v", what, *got, *want)
	}
}

// A beat creates the replica; the next beat replaces every field, and the
// final beat with StoppedAt makes it stopped.
func testReplicasHeartbeatUpsert(t *testing.T, rr store.ReplicaRegistry) {
	t0 := now()
	r := newReplica("r-1", t0)
	heartbeat(t, rr, r)
	got := listReplicas(t, rr, 10)
	if len(got) != 1 {
		t.Fatalf("after one beat: got replicas %q, want [r-1]", replicaIDs(got))
	}
	checkReplica(t, "after the first beat", &got[0], r)
	if s := got[0].State(t0.Add(time.Second)); s != store.ReplicaAlive {
		t.Errorf("state a second after the beat: got %q, want %q", s, store.ReplicaAlive)
	}
	if s := got[0].State(t0.Add(31 * time.Second)); s != store.ReplicaGone {
		t.Errorf("state 31s after a beat every 10s: got %q, want %q", s, store.ReplicaGone)
	}

	next := newReplica("r-1", t0)
	next.BeatAt, next.LastBatchAt, next.Lag = t0.Add(10*time.Second), t0.Add(9*time.Second), 0
	next.Config = map[string]string{"batch_size": "32"}
	next.Definitions = map[string]string{"order": "fp-2", "payment": "fp-3"}
	heartbeat(t, rr, next)
	got = listReplicas(t, rr, 10)
	if len(got) != 1 {
		t.Fatalf("after a second beat: got replicas %q, want [r-1]", replicaIDs(got))
	}
	checkReplica(t, "after the second beat", &got[0], next)

	final := *next
	final.BeatAt, final.StoppedAt = t0.Add(12*time.Second), t0.Add(12*time.Second)
	heartbeat(t, rr, &final)
	got = listReplicas(t, rr, 10)
	checkReplica(t, "after the final beat", &got[0], &final)
	if s := got[0].State(t0.Add(time.Hour)); s != store.ReplicaStopped {
		t.Errorf("state of a replica that stopped: got %q, want %q", s, store.ReplicaStopped)
	}
}

// A beat older than the stored one (it was delayed) changes nothing: it
// cannot undo the final beat.
func testReplicasLateBeatIgnored(t *testing.T, rr store.ReplicaRegistry) {
	t0 := now()
	final := newReplica("r-1", t0)
	final.BeatAt, final.StoppedAt = t0.Add(20*time.Second), t0.Add(20*time.Second)
	heartbeat(t, rr, final)
	late := newReplica("r-1", t0)
	late.BeatAt, late.Host = t0.Add(10*time.Second), "late"
	heartbeat(t, rr, late)
	got := listReplicas(t, rr, 10)
	if len(got) != 1 {
		t.Fatalf("got replicas %q, want [r-1]", replicaIDs(got))
	}
	checkReplica(t, "after a late beat", &got[0], final)
}

// The list is the most recently started first, then by ID, and bounded.
func testReplicasListOrderAndLimit(t *testing.T, rr store.ReplicaRegistry) {
	t0 := now()
	for i, id := range []string{"b", "a", "c", "d"} {
		started := t0.Add(time.Duration(i) * time.Minute)
		if id == "c" {
			started = t0.Add(time.Minute) // as a
		}
		heartbeat(t, rr, newReplica(id, started))
	}
	want := []string{"d", "a", "c", "b"}
	if got := replicaIDs(listReplicas(t, rr, 10)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("replicas: got %q, want %q (latest start first, then by ID)", got, want)
	}
	if got := replicaIDs(listReplicas(t, rr, 2)); fmt.Sprint(got) != fmt.Sprint(want[:2]) {
		t.Errorf("replicas with limit 2: got %q, want %q", got, want[:2])
	}
	if got := listReplicas(t, rr, 0); len(got) != 4 {
		t.Errorf("replicas with limit 0 (the default): got %q, want all 4", replicaIDs(got))
	}
}

// Prune deletes the replicas whose last beat is older than the bound,
// stopped or not, and keeps the others.
func testReplicasPrune(t *testing.T, rr store.ReplicaRegistry) {
	t0 := now()
	old := newReplica("old", t0.Add(-48*time.Hour))
	oldStopped := newReplica("old-stopped", t0.Add(-48*time.Hour))
	oldStopped.StoppedAt = oldStopped.BeatAt
	recent := newReplica("recent", t0.Add(-48*time.Hour))
	recent.BeatAt = t0
	for _, r := range []*store.Replica{old, oldStopped, recent} {
		heartbeat(t, rr, r)
	}
	n, err := rr.PruneReplicas(t.Context(), t0.Add(-24*time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("prune: got %d, %v; want 2, nil", n, err)
	}
	if got := replicaIDs(listReplicas(t, rr, 10)); len(got) != 1 || got[0] != "recent" {
		t.Errorf("after the prune: got replicas %q, want [recent]", got)
	}
	if n, err := rr.PruneReplicas(t.Context(), t0.Add(-24*time.Hour)); err != nil || n != 0 {
		t.Errorf("prune again: got %d, %v; want 0, nil", n, err)
	}
}

// RemoveReplicas deletes exactly the records named by a mark whose beat is
// still the marked one: a replica that beat since, an unmarked one (however
// old its beat) and an unknown ID are kept.
func testReplicasRemoveByMark(t *testing.T, rr store.ReplicaRegistry) {
	t0 := now()
	gone := newReplica("gone", t0.Add(-time.Hour))
	stopped := newReplica("stopped", t0.Add(-time.Hour))
	stopped.StoppedAt = stopped.BeatAt
	back := newReplica("back", t0.Add(-time.Hour))
	unmarked := newReplica("unmarked", t0.Add(-2*time.Hour))
	for _, r := range []*store.Replica{gone, stopped, back, unmarked} {
		heartbeat(t, rr, r)
	}
	var marks []store.ReplicaMark
	for _, r := range listReplicas(t, rr, 10) {
		if r.ID != "unmarked" {
			marks = append(marks, store.ReplicaMark{ID: r.ID, BeatAt: r.BeatAt})
		}
	}
	marks = append(marks, store.ReplicaMark{ID: "unknown", BeatAt: t0})
	next := *back
	next.BeatAt = t0
	heartbeat(t, rr, &next)
	n, err := rr.RemoveReplicas(t.Context(), marks)
	if err != nil || n != 2 {
		t.Fatalf("remove: got %d, %v; want 2, nil", n, err)
	}
	if got := replicaIDs(listReplicas(t, rr, 10)); fmt.Sprint(got) != "[back unmarked]" {
		t.Errorf("after the removal: got replicas %q, want [back unmarked] (back beat after it was read)", got)
	}
	if n, err := rr.RemoveReplicas(t.Context(), nil); err != nil || n != 0 {
		t.Errorf("remove none: got %d, %v; want 0, nil", n, err)
	}
}

// Hostile strings are kept as they are or refused with ErrRejected, and a
// refused beat writes nothing.
func testReplicasHostileStrings(t *testing.T, rr store.ReplicaRegistry) {
	t0 := now()
	for i, s := range []string{"<script>alert(1)</script>", "nul\x00byte", "bad\xffutf8"} {
		r := newReplica(fmt.Sprintf("r-%d", i), t0)
		r.Host, r.Version = s, s
		r.Config = map[string]string{"sagas": s}
		r.Definitions = map[string]string{s: s}
		err := rr.Heartbeat(t.Context(), r)
		if err != nil {
			if !errors.Is(err, store.ErrRejected) {
				t.Errorf("beat with %q: got error %v, want nil or store.ErrRejected", s, err)
			}
			continue
		}
		for _, got := range listReplicas(t, rr, 10) {
			if got.ID == r.ID && (got.Host != s || got.Version != s) {
				t.Errorf("beat with %q: read back host %q, version %q", s, got.Host, got.Version)
			}
		}
	}
	hostileID := "<b>\x00\xff"
	if err := rr.Heartbeat(t.Context(), newReplica(hostileID, t0)); err != nil && !errors.Is(err, store.ErrRejected) {
		t.Errorf("beat of replica %q: got error %v, want nil or store.ErrRejected", hostileID, err)
	}
}

package admin

import (
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// noCounter is a store that keeps heartbeats but cannot count them
// (no readmodel.ReplicaCounter), as a third-party store may.
type noCounter struct {
	store.Store
	store.ReplicaRegistry
}

// The counts come from the store's ReplicaCounter where it has one, and
// else from the most recently started records, judged as the list is.
func TestCountReplicasWithAndWithoutCounter(t *testing.T) {
	ms := memstore.New(nil)
	now := time.Now().UTC()
	for _, r := range []*store.Replica{
		{ID: "live", StartedAt: now.Add(-time.Hour), BeatAt: now, Interval: time.Minute},
		{ID: "replaced", StartedAt: now.Add(-3 * time.Hour), BeatAt: now.Add(-2 * time.Hour), Interval: time.Second},
		{ID: "gone", StartedAt: now.Add(-time.Minute), BeatAt: now.Add(-time.Minute), Interval: time.Second},
		{ID: "stopped", StartedAt: now, BeatAt: now, StoppedAt: now},
	} {
		if err := ms.Heartbeat(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	want := ReplicaCounts{Alive: 1, Stopped: 1, Gone: 1, Replaced: 1}
	for name, st := range map[string]store.Store{"counter": ms, "no counter": noCounter{ms, ms}} {
		caps := resolveCapabilities(st, nil, nil)
		if (caps.replicaCounter != nil) != (name == "counter") {
			t.Fatalf("%s: replicaCounter resolved as %v", name, caps.replicaCounter)
		}
		got, err := caps.countReplicas(t.Context(), now)
		if err != nil || got != want {
			t.Errorf("%s: counts %+v, %v; want %+v", name, got, err, want)
		}
	}
}

package idem_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport/memtransport"
)

// newMemTransport returns an in-memory transport closed when t ends.
func newMemTransport(t *testing.T) *memtransport.Transport {
	tr := memtransport.New(nil)
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// replicasOf lists the replicas of rr by ID.
func replicasOf(t *testing.T, rr store.ReplicaRegistry) map[string]store.Replica {
	t.Helper()
	rs, err := rr.Replicas(t.Context(), 100)
	if err != nil {
		t.Fatalf("list replicas: %v", err)
	}
	out := make(map[string]store.Replica, len(rs))
	for _, r := range rs {
		out[r.ID] = r
	}
	return out
}

// waitReplicas polls the replicas until ok accepts them.
func waitReplicas(t *testing.T, rr store.ReplicaRegistry, what string, ok func(map[string]store.Replica) bool) map[string]store.Replica {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		rs := replicasOf(t, rr)
		if ok(rs) {
			return rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: replicas %+v", what, rs)
		}
		<-tick.C
	}
}

// Two engines on one SQLite file are two replicas, each with its own ID,
// host, version, parallelism and configuration; one that processed a
// message reports its last batch; stopping one marks it stopped at once,
// and the other stays alive.
func TestHeartbeatTwoReplicasOneStopped(t *testing.T) {
	st, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	cfg := func(lanes int) *idem.Config {
		return &idem.Config{Lanes: lanes, HeartbeatInterval: time.Second}
	}
	a := enginetest.NewEngine(t, st, st, cfg(2))
	b := enginetest.NewEngine(t, st, st, cfg(3))
	if a.ReplicaID() == "" || a.ReplicaID() == b.ReplicaID() {
		t.Fatalf("replica IDs %q and %q: want two distinct non-empty IDs", a.ReplicaID(), b.ReplicaID())
	}
	for _, e := range []*idem.Engine{a, b} {
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	stopped := false
	t.Cleanup(func() {
		_ = a.Stop(context.Background())
		if !stopped {
			_ = b.Stop(context.Background())
		}
	})
	rs := waitReplicas(t, st, "two replicas", func(rs map[string]store.Replica) bool { return len(rs) == 2 })
	host, _ := os.Hostname()
	for e, lanes := range map[*idem.Engine]int{a: 2, b: 3} {
		r, ok := rs[e.ReplicaID()]
		switch {
		case !ok:
			t.Fatalf("replica %s not listed: got %+v", e.ReplicaID(), rs)
		case r.Host != host || r.Version == "" || r.Lanes != lanes || r.Consumers != 1 || r.Interval != time.Second:
			t.Errorf("replica %s: got host %q, version %q, lanes %d, consumers %d, interval %s; want host %q, a version, lanes %d, 1 consumer (SQLite), 1s",
				r.ID, r.Host, r.Version, r.Lanes, r.Consumers, r.Interval, host, lanes)
		case r.Config["sagas"] != enginetest.SagaType || r.Config["lanes"] == "" || !strings.Contains(r.Config["store"], "sqlitestore"):
			t.Errorf("replica %s: config summary %v, want the saga %s, the lanes and the store type", r.ID, r.Config, enginetest.SagaType)
		case r.StartedAt.IsZero() || r.BeatAt.Before(r.StartedAt) || !r.StoppedAt.IsZero():
			t.Errorf("replica %s: started %v, beat %v, stopped %v; want a start, a beat after it, not stopped", r.ID, r.StartedAt, r.BeatAt, r.StoppedAt)
		}
		if s := r.State(time.Now()); s != store.ReplicaAlive {
			t.Errorf("replica %s: state %q, want %q", r.ID, s, store.ReplicaAlive)
		}
	}

	env, err := a.NewEnvelope("inc-1", enginetest.Inc{Key: "k-1", N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.PublishAndWait(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	waitReplicas(t, st, "a replica's last batch", func(rs map[string]store.Replica) bool {
		return !rs[a.ReplicaID()].LastBatchAt.IsZero() || !rs[b.ReplicaID()].LastBatchAt.IsZero()
	})

	if err := b.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	stopped = true
	rs = replicasOf(t, st)
	if r := rs[b.ReplicaID()]; r.StoppedAt.IsZero() || r.State(time.Now()) != store.ReplicaStopped {
		t.Errorf("replica %s right after Stop: stopped at %v, state %q; want stopped", r.ID, r.StoppedAt, r.State(time.Now()))
	}
	if r := rs[a.ReplicaID()]; r.State(time.Now()) != store.ReplicaAlive {
		t.Errorf("the replica still running: state %q, want %q", r.State(time.Now()), store.ReplicaAlive)
	}
	// The stopped replica beats no more.
	final := rs[b.ReplicaID()].BeatAt
	waitReplicas(t, st, "another beat of the running replica, a second after the stop", func(rs map[string]store.Replica) bool {
		return rs[a.ReplicaID()].BeatAt.After(final.Add(time.Second))
	})
	if r := replicasOf(t, st)[b.ReplicaID()]; !r.BeatAt.Equal(final) {
		t.Errorf("the stopped replica beat again: last beat %v, want %v", r.BeatAt, final)
	}
}

// hiddenRegistry is a store without store.ReplicaRegistry.
type hiddenRegistry struct{ store.Store }

// A store that keeps no heartbeats: the engine starts, runs and stops
// without error.
func TestHeartbeatWithoutRegistry(t *testing.T) {
	st := hiddenRegistry{memstore.New(nil)}
	q := newMemTransport(t)
	e := enginetest.NewEngine(t, st, q, &idem.Config{HeartbeatInterval: time.Millisecond})
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := e.Ready(); err != nil {
		t.Errorf("ready: %v", err)
	}
	if err := e.Stop(t.Context()); err != nil {
		t.Errorf("stop: got %v, want nil", err)
	}
}

func TestHeartbeatIntervalValidated(t *testing.T) {
	_, err := idem.NewEngine(memstore.New(nil), newMemTransport(t), &idem.Config{HeartbeatInterval: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "HeartbeatInterval") {
		t.Errorf("negative HeartbeatInterval: got %v, want an error naming Config.HeartbeatInterval", err)
	}
	e, err := idem.NewEngine(memstore.New(nil), newMemTransport(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Config().HeartbeatInterval; got != 10*time.Second {
		t.Errorf("default HeartbeatInterval: got %s, want 10s", got)
	}
}

// An engine stopped by a failed loop (its transport closed) writes no
// final beat: it is not a clean stop, and the replica is to be listed as
// gone once its beats are overdue.
func TestHeartbeatNoFinalBeatAfterFailure(t *testing.T) {
	st := memstore.New(nil)
	tr := memtransport.New(nil)
	e := enginetest.NewEngine(t, st, tr, &idem.Config{HeartbeatInterval: time.Hour})
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitReplicas(t, st, "the first beat", func(rs map[string]store.Replica) bool { return len(rs) == 1 })
	_ = tr.Close()
	<-e.Done()
	if err := e.Stop(t.Context()); err == nil {
		t.Fatal("stop after the transport closed: got nil, want the failed loop's error")
	}
	if r := replicasOf(t, st)[e.ReplicaID()]; !r.StoppedAt.IsZero() {
		t.Errorf("replica after a failed loop: stopped at %v, want no final beat", r.StoppedAt)
	}
}

// A gone replica that this one replaced (it started after that replica's
// last beat) is pruned an hour after that beat; a gone replica that beat
// after this one started (no replica replaced it) keeps its record for a
// day, so IdemReplicaGone keeps firing while the capacity is missing.
func TestHeartbeatPrunesReplacedAfterAnHour(t *testing.T) {
	st := memstore.New(nil)
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	now := time.Now()
	for id, beat := range map[string]time.Time{"replaced-2h": now.Add(-2 * time.Hour), "replaced-30m": now.Add(-30 * time.Minute), "gone-later": now.Add(time.Minute)} {
		r := &store.Replica{ID: id, Host: "h", StartedAt: now.Add(-3 * time.Hour), Interval: 10 * time.Second, BeatAt: beat}
		if err := st.Heartbeat(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	e := enginetest.NewEngine(t, st, newMemTransport(t), &idem.Config{HeartbeatInterval: time.Millisecond, Clock: clock})
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	rs := waitReplicas(t, st, "the replica replaced 2 h ago to be pruned", func(rs map[string]store.Replica) bool { _, ok := rs["replaced-2h"]; return !ok })
	if _, ok := rs["replaced-30m"]; !ok {
		t.Errorf("the replica replaced 30 min ago was pruned: replicas %v", rs)
	}
	offset.Store(int64(2 * time.Hour))
	rs = waitReplicas(t, st, "the replica replaced 2.5 h ago to be pruned", func(rs map[string]store.Replica) bool { _, ok := rs["replaced-30m"]; return !ok })
	if _, ok := rs["gone-later"]; !ok {
		t.Errorf("a gone replica nothing replaced was pruned 2 h after its last beat: replicas %v", rs)
	}
}

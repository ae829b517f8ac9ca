package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// replicaCounterCases check readmodel.ReplicaCounter.
var replicaCounterCases = []testCase{
	{"CountsEveryRecord", testReplicaCountsEveryRecord},
}

// countReplicas calls CountReplicas at at and fails the test on an error.
func countReplicas(t *testing.T, rc readmodel.ReplicaCounter, at time.Time) readmodel.ReplicaCounts {
	t.Helper()
	c, err := rc.CountReplicas(t.Context(), at)
	if err != nil {
		t.Fatalf("count replicas: got error %v, want nil", err)
	}
	return *c
}

// CountReplicas counts every record by state, however many records
// started after a live one: 1,000 replicas that started and stopped after
// the live ones do not hide them. A gone replica whose last beat is before
// a live one's start is replaced; a record with no interval has the
// default one.
func testReplicaCountsEveryRecord(t *testing.T, s store.Store) {
	rr, rc := s.(store.ReplicaRegistry), s.(readmodel.ReplicaCounter)
	t0 := now()
	if got := countReplicas(t, rc, t0); got != (readmodel.ReplicaCounts{}) {
		t.Errorf("counts with no replica: got %+v, want all zero", got)
	}
	beat := func(id string, started, beatAt time.Time, interval time.Duration) {
		r := newReplica(id, started)
		r.BeatAt, r.Interval = beatAt, interval
		heartbeat(t, rr, r)
	}
	beat("live", t0.Add(-2*time.Hour), t0.Add(-time.Second), 10*time.Second)
	beat("live-default-interval", t0.Add(-90*time.Minute), t0.Add(-20*time.Second), 0)
	beat("live-long-interval", t0.Add(-4*time.Hour), t0.Add(-100*time.Minute), time.Hour)
	beat("replaced", t0.Add(-3*time.Hour), t0.Add(-150*time.Minute), 10*time.Second)
	beat("gone", t0.Add(-time.Hour), t0.Add(-10*time.Minute), 10*time.Second)
	const stopped = 1000
	for i := range stopped {
		r := newReplica(fmt.Sprintf("stopped-%04d", i), t0.Add(time.Duration(i)*time.Millisecond))
		r.StoppedAt = r.BeatAt
		heartbeat(t, rr, r)
	}
	want := readmodel.ReplicaCounts{Alive: 3, Stopped: stopped, Gone: 1, Replaced: 1}
	if got := countReplicas(t, rc, t0); got != want {
		t.Errorf("counts of %d records, the live ones started before %d stopped ones: got %+v, want %+v", stopped+5, stopped, got, want)
	}
	// Two hours on, every record that has not stopped is gone, and with no
	// live replica none is replaced.
	want = readmodel.ReplicaCounts{Stopped: stopped, Gone: 5}
	if got := countReplicas(t, rc, t0.Add(2*time.Hour)); got != want {
		t.Errorf("counts two hours on: got %+v, want %+v", got, want)
	}
}

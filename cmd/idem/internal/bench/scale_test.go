package bench

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
)

// TestPreloadedStoreIsTheEngines preloads a small store (live sagas with
// inbox records, finished sagas past retention), checks that a unit of work
// loads a preloaded saga and sees its inbox record, then runs the engine on
// it with the sweeper: the workload applies on top of the preloaded
// counters, the exactly-once check passes without counting preloaded rows,
// and still catches a wrong preloaded counter.
func TestPreloadedStoreIsTheEngines(t *testing.T) {
	url := testenv.PostgresURL(t)
	ctx := context.Background()
	o := Options{URL: url, SchemaPrefix: "idem_test_scale", Messages: 300, Keys: 1, Dup: 0.2, Batches: []int{10}, Lanes: []int{1},
		BaselineClients: 1, BaselineBatch: 1, LatencyDuration: time.Second, Timeout: 2 * time.Minute, Seed: 5,
		Sagas: []int{40}, InboxRows: []int{130}, Finished: 25}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	r := &runner{o: o, id: randHex(3), log: testLog{t}}
	run := o.scaled([]EngineRun{{Batch: 10, Lanes: 1, Consumers: 1, MaxConns: 6}})[1] // the run with the sweep
	if run.Scale == nil || run.Scale.Finished != 25 {
		t.Fatalf("scaled: second run has scale %+v, want 25 finished sagas", run.Scale)
	}
	r.w = r.workload(&run)

	st, _, closeFn, err := r.open(ctx, "_load", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if err := r.preload(ctx, st.Pool(), run.Scale); err != nil {
		t.Fatal(err)
	}
	checkLoad(t, st, r.w, 3)

	if err := r.throughput(ctx, &run); err != nil {
		t.Fatal(err)
	}
	if len(run.Problems) > 0 {
		t.Fatalf("exactly-once check on a preloaded store: %v", run.Problems)
	}
	if sw := run.Scale.Sweep; sw == nil || sw.Instances != 25 || sw.Error != "" {
		t.Fatalf("sweep: %+v, want the 25 finished sagas deleted", sw)
	}
	if run.PeakRSSMiB <= 0 {
		t.Errorf("peak RSS %v MiB, want > 0", run.PeakRSSMiB)
	}
}

// checkLoad loads preloaded key k in a unit of work of st and checks its
// counter and its first preloaded inbox record, then that verify counts
// only the workload's rows, and catches a preloaded counter off by one.
func checkLoad(t *testing.T, st interface {
	Begin(context.Context) (store.UnitOfWork, error)
}, w *Workload, k int) {
	t.Helper()
	ctx := context.Background()
	u, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = u.Rollback(ctx) }()
	key := store.Key{SagaType: SagaType, Key: keyName(k)}
	seen := store.InboxKey{SagaType: SagaType, Key: keyName(k), MessageID: incrementType + "\x1f" + preloadPrefix + "3"}
	res, err := u.Load(ctx, &store.LoadParams{Keys: []store.Key{key}, Inbox: []store.InboxKey{seen}})
	if err != nil {
		t.Fatal(err)
	}
	in := res.Instances[key]
	if in == nil {
		t.Fatalf("Load of preloaded %s: no instance", key.Key)
	}
	var c Counter
	if err := json.Unmarshal(in.Data, &c); err != nil || in.State != stateOpen || c.N != w.base(k) || c.N != 4 || in.Version < 1 {
		t.Fatalf("preloaded %s: state %s, data %s (%v), version %d; want Open, n = 4 (130 records over 40 sagas), version ≥ 1", key.Key, in.State, in.Data, err, in.Version)
	}
	if !res.Seen[seen] {
		t.Fatalf("Load of preloaded inbox record %q: not seen", seen.MessageID)
	}
}

// TestVerifyLeavesPreloadedRowsOut: on a preloaded store, before any
// message, verify finds nothing wrong for an empty workload, and reports a
// preloaded counter that differs from its base.
func TestVerifyLeavesPreloadedRowsOut(t *testing.T) {
	url := testenv.PostgresURL(t)
	ctx := context.Background()
	o := Options{URL: url, SchemaPrefix: "idem_test_scale"}
	r := &runner{o: o, id: randHex(3), log: testLog{t}}
	st, _, closeFn, err := r.open(ctx, "_verify", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	sc := &Scale{Sagas: 7, InboxRows: 30, Finished: 3}
	if err := r.preload(ctx, st.Pool(), sc); err != nil {
		t.Fatal(err)
	}
	w := &Workload{Keys: 7, Expected: make([]int, 7), preInbox: 30}
	problems, err := verify(ctx, st.Pool(), w, "idem_journal")
	if err != nil || len(problems) > 0 {
		t.Fatalf("verify of a preloaded store with no workload: %v, %v; want no problems", problems, err)
	}
	if _, err := st.Pool().Exec(ctx, `UPDATE idem_instances SET data = '{"n": 99}' WHERE key = 'k-2'`); err != nil {
		t.Fatal(err)
	}
	problems, err = verify(ctx, st.Pool(), w, "idem_journal")
	if err != nil || len(problems) != 1 || !strings.Contains(problems[0], "k-2") {
		t.Fatalf("verify after breaking k-2's counter: %v, %v; want one problem naming k-2", problems, err)
	}
}

// testLog sends the benchmark's progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Helper()
	l.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

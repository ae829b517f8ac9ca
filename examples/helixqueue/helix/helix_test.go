package helix_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/text/unicode/norm"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/helixqueue/helix"
)

const nfc = "Sämple-Ω-001"

// The NFC and NFD spellings of one sample ID, and a resubmission, are one
// batch with one PENDING audit row; the journal keeps each raw spelling.
func TestTwinsAreOneBatch(t *testing.T) {
	eachStore(t, func(t *testing.T, o helix.Options) {
		ctx := testCtx(t)
		a := start(t, o)
		nfd := norm.NFD.String(nfc)
		if nfd == nfc {
			t.Fatal("test data: NFD twin equals NFC form")
		}
		for _, raw := range []string{nfc, nfd, nfc, nfd} {
			k, err := a.Submit(ctx, raw)
			if err != nil {
				t.Fatal(err)
			}
			if k != nfc {
				t.Errorf("canonical of %q: %q, want %q", raw, k, nfc)
			}
		}
		rows, err := a.DB.Audit(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].To != helix.Pending || rows[0].SampleKey != nfc {
			t.Fatalf("audit rows %+v, want one PENDING row for %q", rows, nfc)
		}
		j, err := a.Journal(ctx, nfd)
		if err != nil {
			t.Fatal(err)
		}
		var raws []string
		for _, e := range j {
			if e.Key != nfc {
				t.Errorf("journal key %q, want %q", e.Key, nfc)
			}
			raw := e.RawKey
			if raw == "" {
				raw = e.Key // RawKey is kept only when it differs
			}
			raws = append(raws, raw)
		}
		if !slices.Contains(raws, nfd) || !slices.Contains(raws, nfc) || len(j) != 2 {
			t.Errorf("journal raw keys %q (%d entries), want the NFC and the NFD spelling, one entry each", raws, len(j))
		}
	})
}

// 50 concurrent assigners on one batch, in five worker processes (each
// its own engine and Redis consumer): exactly one wins, one ASSIGNED audit
// row, one assignment row.
func TestConcurrentAssignersOneActive(t *testing.T) {
	eachStore(t, func(t *testing.T, o helix.Options) {
		ctx := testCtx(t)
		procs := make([]*helix.App, 5)
		for i := range procs {
			procs[i] = start(t, o)
		}
		a := procs[0]
		if _, err := a.Submit(ctx, nfc); err != nil {
			t.Fatal(err)
		}
		const n = 50
		var wg sync.WaitGroup
		won := make(chan string, n)
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := "gpu-" + itoa(i)
				r, err := procs[i%len(procs)].TryAssign(ctx, nfc, w)
				if err != nil {
					errs <- err
				} else if r.Won {
					won <- w
				}
			}()
		}
		wg.Wait()
		close(won)
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		var winners []string
		for w := range won {
			winners = append(winners, w)
		}
		if len(winners) != 1 {
			t.Fatalf("winners %v, want exactly one", winners)
		}
		rows, err := a.DB.Audit(ctx, nfc)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"→PENDING//0", "PENDING→ASSIGNED/" + winners[0] + "/1"}
		if got := transitions(rows); !slices.Equal(got, want) {
			t.Errorf("audit %q, want %q", got, want)
		}
		n1, err := a.DB.Count(ctx, `SELECT COUNT(*) FROM helix_assignments WHERE outcome IS NULL`)
		if err != nil || n1 != 1 {
			t.Errorf("active assignments %d (%v), want 1", n1, err)
		}
	})
}

// A worker killed mid-batch (its process stops while the batch is RUNNING)
// loses its lease to the reaper; another worker takes the batch over, and
// the batch is processed exactly once, every transition audited. The
// killed worker's late report changes nothing.
func TestKilledWorkerReclaimedOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, o helix.Options) {
		ctx := testCtx(t)
		o.Machine.Lease = time.Second
		a := start(t, o)
		if _, err := a.Submit(ctx, nfc); err != nil {
			t.Fatal(err)
		}
		// Worker A, a process of its own, wins the batch and hangs in it.
		pa := start(t, o)
		began := make(chan struct{})
		wa := &helix.Worker{ID: "gpu-a", App: pa, Work: func(ctx context.Context, _ string, _ int) (string, error) {
			close(began)
			<-ctx.Done()
			return "", ctx.Err()
		}}
		actx, kill := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { _, err := wa.RunOne(actx); done <- err }()
		select {
		case <-began:
		case err := <-done:
			t.Fatalf("worker A did not start the batch: %v", err)
		}
		kill()
		<-done
		stop(t, pa)

		waitFor(t, "the reaper to release the batch", 30*time.Second, func() bool {
			p, err := a.DB.PendingBatches(ctx, 1)
			return err == nil && len(p) == 1
		})
		// While B runs the batch, A comes back and reports its attempt:
		// fenced off, the batch stays RUNNING under B.
		var lateState string
		wb := &helix.Worker{ID: "gpu-b", App: a, Work: func(ctx context.Context, s string, at int) (string, error) {
			r, err := a.Engine.PublishAndWait(ctx, mustEnv(t, "late-a", helix.Complete{SampleID: nfc, Worker: "gpu-a", Attempt: 1, Result: "stale"}))
			lateState = r.State
			return "reads:" + s, err
		}}
		out, err := wb.RunOne(ctx)
		if err != nil || !out.Ran || out.Attempt != 2 {
			t.Fatalf("worker B: %+v, %v; want it to run attempt 2", out, err)
		}
		if lateState != helix.Running {
			t.Errorf("after gpu-a's late report the batch is %q, want RUNNING (gpu-b's)", lateState)
		}
		res, err := a.DB.Results(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 1 || res[0].Worker != "gpu-b" || res[0].Attempt != 2 {
			t.Errorf("results %+v, want one, by gpu-b attempt 2", res)
		}
		rows, err := a.DB.Audit(ctx, nfc)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"→PENDING//0", "PENDING→ASSIGNED/gpu-a/1", "ASSIGNED→RUNNING/gpu-a/1", "RUNNING→PENDING/gpu-a/1",
			"PENDING→ASSIGNED/gpu-b/2", "ASSIGNED→RUNNING/gpu-b/2", "RUNNING→COMPLETED/gpu-b/2"}
		if got := transitions(rows); !slices.Equal(got, want) {
			t.Errorf("audit\n%q, want\n%q", got, want)
		}
		if rows[3].Reason != helix.ReasonLeaseExpired {
			t.Errorf("release reason %q, want %q", rows[3].Reason, helix.ReasonLeaseExpired)
		}
	})
}

// A failing statement after the audit insert: neither the ASSIGNED state
// nor its audit row nor the assignment row lands.
func TestAuditAtomicWithTransition(t *testing.T) {
	eachStore(t, func(t *testing.T, o helix.Options) {
		ctx := testCtx(t)
		o.Machine.FaultAfterAudit = helix.Assigned
		a := start(t, o)
		if _, err := a.Submit(ctx, nfc); err != nil {
			t.Fatal(err)
		}
		_, err := a.TryAssign(ctx, nfc, "gpu-x")
		if !errors.Is(err, idem.ErrDeadLettered) || !strings.Contains(err.Error(), helix.ErrFault.Error()) {
			t.Fatalf("assign with the fault: %v, want a dead letter naming the fault", err)
		}
		rows, err := a.DB.Audit(ctx, nfc)
		if err != nil {
			t.Fatal(err)
		}
		if got := transitions(rows); !slices.Equal(got, []string{"→PENDING//0"}) {
			t.Errorf("audit %q, want only the PENDING row", got)
		}
		n, err := a.DB.Count(ctx, `SELECT COUNT(*) FROM helix_assignments`)
		if err != nil || n != 0 {
			t.Errorf("assignment rows %d (%v), want 0", n, err)
		}
		j, err := a.Journal(ctx, nfc)
		if err != nil {
			t.Fatal(err)
		}
		if len(j) != 1 || j[0].ToState != helix.Pending {
			t.Errorf("journal %+v, want the batch still PENDING", j)
		}
	})
}

// Hostile sample IDs are refused with an error naming the problem.
func TestHostileSampleIDs(t *testing.T) {
	for raw, want := range map[string]string{"a\x00b": "control", "\xff\xfe": "UTF-8", "": "empty"} {
		_, err := helix.CanonicalID(raw)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CanonicalID(%q): %v, want an error mentioning %q", raw, err, want)
		}
	}
	if k, err := helix.CanonicalID("<script>"); err != nil || k != "<script>" {
		t.Errorf("CanonicalID(<script>): %q, %v; want it kept as is", k, err)
	}
}

func mustEnv(t *testing.T, id string, msg any) idem.Envelope {
	t.Helper()
	env, err := idem.NewEnvelope(id, msg)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// A worker process that hangs after it received an Assign and before it
// committed: Redis hands the delivery to another process once its lease
// expires, which applies it; when the stuck process resumes, its writes
// do not land (the audit row's message ID is taken, the saga moved on),
// so the transition is audited exactly once.
func TestStoppedBeforeCommitReclaimed(t *testing.T) {
	eachStore(t, func(t *testing.T, o helix.Options) {
		ctx := testCtx(t)
		o.DeliveryLease = time.Second
		// A hung process renews its leases this long, then loses them.
		o.MaxLeaseRenewal = 2 * time.Second
		entered, release := make(chan struct{}), make(chan struct{})
		var once, released sync.Once
		ho := o
		ho.Machine.BeforeWrite = func(_ context.Context, to string) error {
			if to == helix.Assigned {
				once.Do(func() { close(entered) })
				<-release // stuck: neither crashed nor committing
			}
			return nil
		}
		pa := start(t, ho)
		// Run before pa's stop (cleanups run last first): a failure below
		// must not leave the stuck process unable to stop.
		t.Cleanup(func() { released.Do(func() { close(release) }) })
		if _, err := pa.Submit(ctx, nfc); err != nil {
			t.Fatal(err)
		}
		if err := pa.Engine.Publish(ctx, mustEnv(t, "assign-stuck", helix.Assign{SampleID: nfc, Worker: "gpu-a", Request: "r-a"})); err != nil {
			t.Fatal(err)
		}
		<-entered // process A hangs here: to Redis it is as good as dead

		pb := start(t, o)
		waitFor(t, "another process to apply the reclaimed Assign", 30*time.Second, func() bool {
			rows, err := pb.DB.Audit(ctx, nfc)
			return err == nil && len(rows) == 2
		})
		released.Do(func() { close(release) }) // the stuck process resumes, and stops
		stop(t, pa)
		rows, err := pb.DB.Audit(ctx, nfc)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"→PENDING//0", "PENDING→ASSIGNED/gpu-a/1"}
		if got := transitions(rows); !slices.Equal(got, want) {
			t.Errorf("audit %q, want %q", got, want)
		}
		if rows[1].MessageID != "assign-stuck" {
			t.Errorf("ASSIGNED row's message %q, want assign-stuck", rows[1].MessageID)
		}
		n, err := pb.DB.Count(ctx, `SELECT COUNT(*) FROM helix_assignments`)
		if err != nil || n != 1 {
			t.Errorf("assignment rows %d (%v), want 1", n, err)
		}
	})
}

// The race the README describes: two processes that both read a batch
// PENDING apply their Assign at once. One wins. The other finds the
// winner's assignment row, the expected outcome of the race: it is logged
// at INFO as such, never at WARN as a failure, and the loser's Assign is
// then ignored.
func TestAssignRaceIsNotAWarning(t *testing.T) {
	eachStore(t, func(t *testing.T, o helix.Options) {
		ctx := testCtx(t)
		logs := &logRecorder{}
		o.Logger = slog.New(logs)
		arrived, release := make(chan struct{}, 2), make(chan struct{})
		var n atomic.Int32
		o.Machine.BeforeWrite = func(ctx context.Context, to string) error {
			if to != helix.Assigned || n.Add(1) > 2 {
				return nil
			}
			arrived <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// Two processes on one store, each with a Redis namespace of its
		// own, so that each applies its own Assign.
		p1 := start(t, o)
		o2 := o
		o2.Namespace += "-2"
		p2 := start(t, o2)
		if _, err := p1.Submit(ctx, nfc); err != nil {
			t.Fatal(err)
		}
		type outcome struct {
			r   helix.AssignResult
			err error
		}
		results := make(chan outcome, 2)
		for i, p := range []*helix.App{p1, p2} {
			go func() {
				r, err := p.TryAssign(ctx, nfc, "gpu-"+itoa(i+1))
				results <- outcome{r, err}
			}()
		}
		for range 2 {
			select {
			case <-arrived: // read PENDING, about to write
			case <-ctx.Done():
				t.Fatal("the two Assigns did not both reach their writes")
			}
		}
		close(release)
		var winners int
		for range 2 {
			o := <-results
			if o.err != nil {
				t.Fatal(o.err)
			}
			if o.r.Won {
				winners++
			}
		}
		if winners != 1 {
			t.Fatalf("%d winners, want 1", winners)
		}
		var lost bool
		for _, r := range logs.records() {
			if r.Level >= slog.LevelWarn {
				t.Errorf("logged as a failure: %s", describe(r))
			}
			lost = lost || (r.Level == slog.LevelInfo && strings.Contains(r.Message, "lost the race"))
		}
		if !lost {
			t.Error("no INFO record says that an assigner lost the race")
		}
		rows, err := p1.DB.Audit(ctx, nfc)
		if err != nil {
			t.Fatal(err)
		}
		if got := transitions(rows); len(got) != 2 || got[1] != "PENDING→ASSIGNED/"+rows[1].Worker+"/1" {
			t.Errorf("audit %q, want PENDING then one ASSIGNED", got)
		}
	})
}

// An active assignment that no concurrent Assign explains (a row written
// outside the saga) is not taken for a lost race: the Assign fails with
// ErrActiveAssignment and the batch stays PENDING, without audit row.
func TestAssignRefusesForeignActiveAssignment(t *testing.T) {
	eachStore(t, func(t *testing.T, o helix.Options) {
		ctx := testCtx(t)
		a := start(t, o)
		if _, err := a.Submit(ctx, nfc); err != nil {
			t.Fatal(err)
		}
		q := `INSERT INTO helix_assignments (sample_key, attempt, worker, state) VALUES ('` + nfc + `', 1, 'rogue', 'ASSIGNED')`
		if _, err := a.DB.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
		_, err := a.TryAssign(ctx, nfc, "gpu-1")
		if !errors.Is(err, idem.ErrDeadLettered) || !strings.Contains(err.Error(), helix.ErrActiveAssignment.Error()) {
			t.Fatalf("assign over a foreign active assignment: %v, want a dead letter naming %q", err, helix.ErrActiveAssignment)
		}
		rows, err := a.DB.Audit(ctx, nfc)
		if err != nil {
			t.Fatal(err)
		}
		if got := transitions(rows); !slices.Equal(got, []string{"→PENDING//0"}) {
			t.Errorf("audit %q, want only the PENDING row", got)
		}
	})
}

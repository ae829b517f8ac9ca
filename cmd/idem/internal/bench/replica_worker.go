package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// ReplicaWorker configures one engine process of a replica sweep
// (RunReplicas): an engine with the zero idem.Config and pgstore's default
// pool on a schema the sweep created, consuming one phase's workload.
type ReplicaWorker struct {
	// URL is the PostgreSQL connection string; Schema the sweep's schema.
	URL, Schema string
	// AllowUnsafeCommit accepts a server with synchronous_commit=off.
	AllowUnsafeCommit bool
	// Messages, Keys, Dup, Seed and Prefix rebuild the phase's workload
	// (NewWorkload), as the sweep built it.
	Messages, Keys int
	Dup            float64
	Seed           uint64
	Prefix         string
	// Broker, when set, is the transport; nil means the store's queue.
	Broker *Broker
	// Log receives the engine's errors.
	Log io.Writer
}

// replicaSnapshot is what a worker reports when it stops: the engine's
// counters, the store's round trips since "go", and when each delivery of
// the phase's stream first committed here (Unix nanoseconds by stream
// position, 0 for the deliveries another replica committed).
type replicaSnapshot struct {
	Applied     int64   `json:"applied"`
	Duplicates  int64   `json:"duplicates"`
	Conflicts   int64   `json:"conflicts"`
	Retries     int64   `json:"retries"`
	LeaseLost   int64   `json:"lease_lost"`
	Redelivered int64   `json:"redelivered"`
	RoundTrips  int64   `json:"round_trips"`
	Statements  int64   `json:"statements"`
	ClaimedInTx int64   `json:"claimed_in_tx"`
	UnitsOfWork int64   `json:"units_of_work"`
	Receives    int64   `json:"receives"`
	Received    int64   `json:"received"`
	PoolSize    int     `json:"pool_size"`
	Committed   []int64 `json:"committed"`
}

// The worker's protocol on its standard streams: it writes replicaReady
// when its store is open and its engine built, starts the engine when it
// reads replicaGo, stops it at the end of its input, and then writes one
// line of JSON, its replicaSnapshot.
const (
	replicaReady = "ready"
	replicaGo    = "go"
)

// RunReplicaWorker runs one replica of a sweep, speaking the protocol
// above on in and out.
func RunReplicaWorker(ctx context.Context, o ReplicaWorker, in io.Reader, out io.Writer) error {
	logger := slog.New(slog.NewTextHandler(cmpWriter(o.Log), &slog.HandlerOptions{Level: slog.LevelError}))
	st, err := pgstore.Open(ctx, o.URL, &pgstore.Config{Schema: o.Schema, AllowUnsafeCommit: o.AllowUnsafeCommit, Logger: logger})
	if err != nil {
		return fmt.Errorf("open the store: %w", err)
	}
	defer st.Close()
	w := NewWorkload(o.Messages, o.Keys, o.Dup, o.Seed, o.Prefix)
	t := newTap(st, len(w.Deliveries))
	t.claimTx = true // the engine claims in units of work where its defaults let it
	var tr transport.Transport = t
	if o.Broker != nil {
		bt, err := o.Broker.New(ctx, o.Schema, []string{incrementType})
		if err != nil {
			return fmt.Errorf("open transport %s: %w", o.Broker.Name, err)
		}
		defer bt.Close()
		t.byID(w)
		tr = tapTransport(bt, t)
	}
	e, err := idem.NewEngine(t, tr, &idem.Config{Logger: logger})
	if err == nil {
		err = e.Register(Machine())
	}
	if err != nil {
		return err
	}
	lines := bufio.NewScanner(in)
	if _, err := fmt.Fprintln(out, replicaReady); err != nil {
		return err
	}
	if !lines.Scan() || lines.Text() != replicaGo {
		return errors.New("the sweep did not say go")
	}
	trips0, stmts0 := st.RoundTrips(), st.Statements()
	if err := e.Start(ctx); err != nil {
		return err
	}
	for lines.Scan() { // until the sweep closes our input
	}
	if err := e.Stop(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("stop the engine: %w", err)
	}
	return json.NewEncoder(out).Encode(snapshot(e, st, t, trips0, stmts0))
}

// snapshot is what the worker reports of engine e on st through tap t.
func snapshot(e *idem.Engine, st *pgstore.Store, t *tap, trips0, stmts0 int64) *replicaSnapshot {
	s := e.Stats()
	snap := &replicaSnapshot{
		Received: s.Received, Applied: s.Applied, Duplicates: s.Duplicates, Conflicts: s.Conflicts, Retries: s.Retries,
		RoundTrips: st.RoundTrips() - trips0, Statements: st.Statements() - stmts0, PoolSize: st.PoolSize(),
	}
	for _, ts := range e.TypeStats() {
		snap.LeaseLost += ts.LeaseLost
		snap.Redelivered += ts.Redelivered
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	snap.ClaimedInTx, snap.UnitsOfWork, snap.Receives = t.claimedInTx, t.timing.UnitsOfWork, t.timing.Receives
	snap.Committed = make([]int64, len(t.committed))
	for i, c := range t.committed {
		if !c.IsZero() {
			snap.Committed[i] = c.UnixNano()
		}
	}
	return snap
}

// cmpWriter is w, or io.Discard when w is nil.
func cmpWriter(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

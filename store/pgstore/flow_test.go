package pgstore_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/storetest"
	"github.com/idemhq/idem/transport"
)

// holdsTracer counts the statements sent that name idem_limit_holds.
type holdsTracer struct{ n atomic.Int64 }

func (h *holdsTracer) see(sql string) {
	if strings.Contains(sql, "idem_limit_holds") {
		h.n.Add(1)
	}
}

func (h *holdsTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	h.see(d.SQL)
	return ctx
}
func (h *holdsTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (h *holdsTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (h *holdsTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	h.see(d.SQL)
}
func (h *holdsTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// tracedStore returns a store with a 5 s lease, in a schema of its own,
// on a pool whose connections report to tr, and the pool.
func tracedStore(t *testing.T, tr pgx.QueryTracer) (*pgstore.Store, *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	schema := openStore(t, pgstore.Config{}).Schema()
	pc, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.RuntimeParams["search_path"] = pgstore.SearchPath(schema)
	pc.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := pgstore.New(ctx, pool, &pgstore.Config{Schema: schema, Lease: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, pool
}

// The plain queue paths (Receive, a unit of work's Consume, Ack, Nack,
// ExtendLeases) send no statement about holds: flow control costs them
// nothing. The deliveries of ReceiveAdmitted do, as a control.
func TestPlainQueuePathsSendNoHoldStatement(t *testing.T) {
	testenv.PostgresURL(t)
	t.Parallel()
	ctx := t.Context()
	tr := &holdsTracer{}
	s, _ := tracedStore(t, tr)
	var envs []transport.Envelope
	for _, id := range []string{"a", "b", "c", "d"} {
		envs = append(envs, transport.Envelope{ID: id, Type: "t", CorrelationID: id, Body: []byte(`{}`)})
	}
	if err := s.Publish(ctx, envs); err != nil {
		t.Fatal(err)
	}
	ds, err := s.Receive(ctx, 3)
	if err != nil || len(ds) != 3 {
		t.Fatalf("receive: got %d deliveries, %v, want 3", len(ds), err)
	}
	if err := s.ExtendLeases(ctx, ds); err != nil {
		t.Fatal(err)
	}
	uow, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.(store.QueueUnitOfWork).Consume(ctx, ds[:1]); err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &store.Changes{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(ctx, ds[1:2]); err != nil {
		t.Fatal(err)
	}
	if err := s.Nack(ctx, ds[2], time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := tr.n.Load(); n != 0 {
		t.Fatalf("the plain queue paths sent %d statements about holds, want 0", n)
	}
	lim := map[string]store.Limit{"api": {Name: "api", Concurrency: 1}}
	ad, err := s.ReceiveAdmitted(ctx, &store.ReceiveParams{Max: 1, Limits: lim, Needs: func(*transport.Envelope) []store.LimitKey {
		return []store.LimitKey{{Name: "api"}}
	}})
	if err != nil || len(ad) != 1 {
		t.Fatalf("receive admitted: got %d deliveries, %v, want 1", len(ad), err)
	}
	before := tr.n.Load()
	if err := s.Ack(ctx, ad); err != nil {
		t.Fatal(err)
	}
	if tr.n.Load() == before {
		t.Error("the Ack of an admitted delivery sent no statement about holds: the control failed")
	}
}

// BenchmarkFairShare: a quiet tenant's latency alone, behind a flood of
// 5,000 messages in the queue's order, and behind it in fair order
// (storetest.BenchFairShare; docs/benchmarks.md).
func BenchmarkFairShare(b *testing.B) {
	storetest.BenchFairShare(b, func(tb testing.TB) store.AdmittingQueue {
		return openStore(tb, pgstore.Config{PollInterval: 5 * time.Millisecond})
	}, 5000)
}

// batchTracer counts the pipelined batches sent: each is one round trip.
type batchTracer struct {
	holdsTracer
	batches atomic.Int64
}

func (b *batchTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	b.batches.Add(1)
	return ctx
}

// An admitting receive whose limits all cover (ReceiveParams.Covering)
// locks their counters in its first batch, so it takes two round trips
// (the window with the counters, then the holds, the lease and the
// commit) instead of three, and only when a message is visible: a
// receive of an empty queue writes no counter.
func TestCoveringReceiveLocksCountersOnlyWithWork(t *testing.T) {
	testenv.PostgresURL(t)
	t.Parallel()
	ctx := t.Context()
	tr := &batchTracer{}
	s, pool := tracedStore(t, tr)
	lim := map[string]store.Limit{"api": {Name: "api", Concurrency: 10}}
	p := &store.ReceiveParams{Max: 2, Limits: lim, Covering: []string{"api"}, Needs: func(*transport.Envelope) []store.LimitKey {
		return []store.LimitKey{{Name: "api"}}
	}}
	counters := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_limit_counters`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	empty, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if ds, err := s.ReceiveAdmitted(empty, p); err == nil {
		t.Fatalf("receive of an empty queue: got %d deliveries, want none", len(ds))
	}
	if n := counters(); n != 0 {
		t.Fatalf("a receive of an empty queue wrote %d counters, want 0", n)
	}
	if err := s.Publish(ctx, []transport.Envelope{{ID: "a", Type: "t", CorrelationID: "a", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	before := tr.batches.Load()
	ds, err := s.ReceiveAdmitted(ctx, p)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive admitted: got %d deliveries, %v, want 1", len(ds), err)
	}
	if n := tr.batches.Load() - before; n != 2 {
		t.Errorf("a covering receive with work sent %d batches, want 2 (the counters locked with the window)", n)
	}
	if n := counters(); n != 1 {
		t.Errorf("counters after an admission: got %d, want 1 (api)", n)
	}
	if u, err := s.LimitUses(ctx); err != nil || len(u) != 1 || u[0].InFlight != 1 {
		t.Errorf("limit uses: got %+v, %v, want api with 1 in flight", u, err)
	}
}

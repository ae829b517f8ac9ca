package pgstore_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// At the smallest pool pgstore accepts, a Receive that keeps the queue
// listener's connection must leave Publish one: with a pool of one
// connection, Publish waited for its deadline.
func TestListenerLeavesPublishAConnection(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	ctx := context.Background()
	schema := "t_" + randHex()
	openSchema(t, schema) // migrated, dropped at the end
	var s *pgstore.Store
	for size := int32(1); s == nil; size++ {
		var err error
		s, err = pgstore.Open(ctx, url, &pgstore.Config{Schema: schema, MaxConns: size, PollInterval: time.Hour})
		switch {
		case err == nil:
			t.Cleanup(func() { _ = s.Close() })
			t.Logf("smallest pool accepted: %d connections", size)
		case size > 4:
			t.Fatalf("Open refused every pool up to %d connections: %v", size, err)
		case !strings.Contains(err.Error(), "MaxConns"):
			t.Fatalf("Open with MaxConns %d: got %v, want a refusal naming MaxConns", size, err)
		}
	}

	received := make(chan []transport.Delivery, 1)
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	go func() {
		ds, err := s.Receive(rctx, 10)
		if err != nil {
			t.Errorf("receive: %v", err)
		}
		received <- ds
	}()
	// Wait until the Receive found the queue empty (a claim and a look at
	// the next visible time, one connection each) and waits for a
	// notification, with the listener holding its connection.
	deadline := time.Now().Add(10 * time.Second)
	for st := s.Pool().Stat(); st.AcquiredConns() != 1 || st.AcquireCount() < 3; st = s.Pool().Stat() {
		if time.Now().After(deadline) {
			t.Fatalf("within 10s, the Receive did not settle to waiting with the listener's connection: %d acquired, %d acquisitions", st.AcquiredConns(), st.AcquireCount())
		}
		runtime.Gosched()
	}
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	if err := s.Publish(pctx, []transport.Envelope{{ID: "m-1", Type: "t", CorrelationID: "k"}}); err != nil {
		t.Fatalf("publish while the listener holds a connection of the smallest pool: %v", err)
	}
	// The notification wakes the Receive at once (the poll is an hour).
	if ds := <-received; len(ds) != 1 || ds[0].Envelope.ID != "m-1" {
		t.Fatalf("receive: got %+v, want m-1", ds)
	}
}

func TestNewRefusesPoolOfOneConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := "t_" + randHex()
	openSchema(t, schema)
	pc, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1
	pc.ConnConfig.RuntimeParams["search_path"] = pgstore.SearchPath(schema)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pgstore.New(ctx, pool, &pgstore.Config{Schema: schema}); err == nil || !strings.Contains(err.Error(), "MaxConns") {
		t.Fatalf("New on a pool of one connection: got %v, want a refusal naming MaxConns", err)
	}
}

// The default pool fits the default engine, whatever the number of CPUs:
// Lanes default to 2×GOMAXPROCS. The test changes GOMAXPROCS, so it does
// not run in parallel.
func TestDefaultPoolFitsDefaultEngine(t *testing.T) {
	testenv.PostgresURL(t)
	for _, procs := range []int{1, 8, 32} {
		prev := runtime.GOMAXPROCS(procs)
		s := openStore(t, pgstore.Config{})
		e := newEngine(t, s, nil)
		err := e.Start(context.Background())
		want := pgstore.DefaultMaxConns()
		runtime.GOMAXPROCS(prev)
		if err != nil {
			t.Fatalf("GOMAXPROCS %d: default engine on the default pool (%d connections): Start: %v", procs, s.PoolSize(), err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := e.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		cancel()
		if s.PoolSize() != int(want) || want < int32(2*procs+3) {
			t.Errorf("GOMAXPROCS %d: PoolSize: got %d, want the default %d, at least 2×GOMAXPROCS + 3", procs, s.PoolSize(), want)
		}
	}
}

// An engine refuses a pool smaller than it needs, naming the numbers.
func TestEngineRefusesSmallPool(t *testing.T) {
	t.Parallel()
	s := openStore(t, pgstore.Config{MaxConns: 6})
	e := newEngine(t, s, &idem.Config{Lanes: 4, Consumers: 2}) // needs 4 + 3 = 7
	err := e.Start(context.Background())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Stop(ctx)
		t.Fatal("Start on a pool of 6 connections for an engine needing 7: got nil, want a refusal")
	}
	for _, want := range []string{"holds 6 connections", "needs 7", "queue listener", "MaxConns"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v: want a refusal, not a timeout", err)
	}
}

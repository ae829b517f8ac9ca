package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// An idle receiver woken for nothing (a NOTIFY of another partition, a
// poll) pays one statement in one round trip: the claim and the next
// visible time of its partition come back together. Many replicas, each
// woken by every commit that enqueues, otherwise spend two transactions
// per wake-up finding nothing (docs/scaling.md, "Many replicas").
func TestReceiveEmptyPartitionIsOneRoundTrip(t *testing.T) {
	testenv.PostgresURL(t)
	t.Parallel()
	emptyReceiveIsOneRoundTrip(t, openStore(t, pgstore.Config{Lease: time.Minute, PollInterval: time.Hour}))
}

// Through PgBouncer in transaction mode too, where the statement's names
// are qualified on the wire (poolersql.go) and sent unprepared.
func TestReceiveEmptyPartitionIsOneRoundTripThroughPgBouncer(t *testing.T) {
	t.Parallel()
	emptyReceiveIsOneRoundTrip(t, openPooled(t, pgstore.Config{Lease: time.Minute, PollInterval: time.Hour}))
}

func emptyReceiveIsOneRoundTrip(t *testing.T, s *pgstore.Store) {
	ctx := t.Context()
	empty := otherPartition(t, s, "m-other")

	trips, stmts := s.RoundTrips(), s.Statements()
	ds, next, err := pgstore.TakeOnce(ctx, s, 10, empty, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 0 {
		t.Fatalf("got %d deliveries from the empty partition %d, want none", len(ds), empty)
	}
	if got := s.RoundTrips() - trips; got != 1 {
		t.Errorf("an empty receive cost %d round trips, want 1", got)
	}
	if got := s.Statements() - stmts; got != 1 {
		t.Errorf("an empty receive cost %d statements, want 1", got)
	}
	if !next.IsZero() {
		t.Errorf("next visible time of the empty partition: got %v, want none (the other partition's message must not count)", next)
	}
}

// The next visible time an empty receive returns is its partition's next
// message, not another partition's visible one (which would make it spin).
func TestReceiveEmptyPartitionNextVisible(t *testing.T) {
	testenv.PostgresURL(t)
	t.Parallel()
	ctx := t.Context()
	s := openStore(t, pgstore.Config{Lease: time.Minute, PollInterval: time.Hour})
	p := partitionOf(t, s, "m-later") // then nacked for an hour
	ds, err := s.ReceivePartition(ctx, 1, p, 2)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive m-later: %v, %d deliveries", err, len(ds))
	}
	if err := s.Nack(ctx, ds[0], time.Hour); err != nil {
		t.Fatal(err)
	}
	conn := schemaConn(t, s.Schema())
	var want time.Time
	if err := conn.QueryRow(ctx, `SELECT visible_at FROM idem_queue WHERE id = 'm-later'`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	other := publishTo(t, s, 1-p, "m-now") // visible, in the other partition

	ds, next, err := pgstore.TakeOnce(ctx, s, 10, p, 2)
	if err != nil || len(ds) != 0 {
		t.Fatalf("take partition %d: %v, %d deliveries, want none", p, err, len(ds))
	}
	if !next.Equal(want) {
		t.Errorf("next visible time of partition %d: got %v, want %v (m-later's; %s in partition %d is visible now)", p, next, want, other, 1-p)
	}
	if ds, next, err := pgstore.TakeOnce(ctx, s, 10, 0, 1); err != nil || len(ds) != 1 || !next.IsZero() {
		t.Errorf("take unpartitioned: %v, %d deliveries, next %v: want m-now and no next time", err, len(ds), next)
	}
	if err := conn.QueryRow(ctx, `SELECT visible_at FROM idem_queue WHERE id = $1`, other).Scan(&want); err != nil {
		t.Fatal(err)
	}
	ds, next, err = pgstore.TakeOnce(ctx, s, 10, 0, 1)
	if err != nil || len(ds) != 0 || !next.Equal(want) {
		t.Errorf("take unpartitioned again: %v, %d deliveries, next %v: want none, next %v (the end of %s's lease)", err, len(ds), next, want, other)
	}
}

// A visible message that another consumer holds locked (its claim in
// flight) is not one the empty receive may wait for: the next visible time
// must not be in the past, or every receiver that lost the race to it
// would claim again at once, and a herd woken by one NOTIFY would pay
// twice.
func TestReceiveEmptyPartitionSkipsLockedWithoutSpinning(t *testing.T) {
	testenv.PostgresURL(t)
	t.Parallel()
	ctx := t.Context()
	lease := time.Minute
	s := openStore(t, pgstore.Config{Lease: lease, PollInterval: time.Hour})
	if err := s.Publish(ctx, []transport.Envelope{{ID: "m-held", Type: "t", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	conn := schemaConn(t, s.Schema())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT now() FROM idem_queue WHERE id = 'm-held' FOR UPDATE`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	ds, next, err := pgstore.TakeOnce(ctx, s, 10, 0, 1)
	if err != nil || len(ds) != 0 {
		t.Fatalf("take while m-held is locked: %v, %d deliveries, want none", err, len(ds))
	}
	if !next.After(now) {
		t.Errorf("next visible time while m-held is locked by another transaction: got %v, want after %v (the receiver would spin)", next, now)
	}
	if limit := time.Now().Add(2 * lease); next.After(limit) {
		t.Errorf("next visible time while m-held is locked: got %v, want at most a lease away", next)
	}
}

// otherPartition publishes id and returns the partition of two it is not in.
func otherPartition(t testing.TB, s *pgstore.Store, id string) int {
	t.Helper()
	return 1 - partitionOf(t, s, id)
}

// partitionOf publishes id and returns its partition of two.
func partitionOf(t testing.TB, s *pgstore.Store, id string) int {
	t.Helper()
	if err := s.Publish(t.Context(), []transport.Envelope{{ID: id, Type: "t", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	var p int
	if err := schemaConn(t, s.Schema()).QueryRow(t.Context(), `SELECT part % 2 FROM idem_queue WHERE id = $1`, id).Scan(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

// publishTo publishes a message of partition p of two, trying IDs until
// one lands there, and returns its ID.
func publishTo(t testing.TB, s *pgstore.Store, p int, prefix string) string {
	t.Helper()
	conn := schemaConn(t, s.Schema())
	for i := range 64 {
		id := fmt.Sprintf("%s-%d", prefix, i)
		var got int
		if err := conn.QueryRow(t.Context(), `SELECT (hashtext($1) & 2147483647) % 2`, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got == p {
			if err := s.Publish(t.Context(), []transport.Envelope{{ID: id, Type: "t", Body: []byte(`{}`)}}); err != nil {
				t.Fatal(err)
			}
			return id
		}
	}
	t.Fatalf("no ID of prefix %s hashes to partition %d", prefix, p)
	return ""
}

// BenchmarkReceiveEmpty measures one take of an idle receiver on an
// empty partition: round trips and statements per take.
func BenchmarkReceiveEmpty(b *testing.B) {
	s := openStore(b, pgstore.Config{Lease: time.Minute, PollInterval: time.Hour})
	empty := otherPartition(b, s, "m-other")
	ctx := context.Background()
	trips, stmts := s.RoundTrips(), s.Statements()
	b.ResetTimer()
	for range b.N {
		if ds, _, err := pgstore.TakeOnce(ctx, s, 64, empty, 2); err != nil || len(ds) != 0 {
			b.Fatalf("take: %v, %d deliveries", err, len(ds))
		}
	}
	b.ReportMetric(float64(s.RoundTrips()-trips)/float64(b.N), "trips/op")
	b.ReportMetric(float64(s.Statements()-stmts)/float64(b.N), "stmts/op")
}

// BenchmarkReceiveHerd publishes one message at a time to replicas
// stores on one schema, each with a receiver waiting, as replicas of one
// deployment would: every publish's NOTIFY wakes every receiver, one of
// them takes the message and acks it, and the others find nothing. It
// reports the statements and round trips of all the stores per delivery.
func BenchmarkReceiveHerd(b *testing.B) {
	for _, replicas := range []int{1, 4, 16} {
		b.Run(fmt.Sprint("replicas=", replicas), func(b *testing.B) {
			benchHerd(b, replicas)
		})
	}
}

func benchHerd(b *testing.B, replicas int) {
	cfg := pgstore.Config{Lease: time.Minute, PollInterval: time.Hour}
	first := openStore(b, cfg)
	stores := []*pgstore.Store{first}
	for range replicas - 1 {
		s, err := pgstore.Open(context.Background(), testenv.PostgresURL(b), &pgstore.Config{Schema: first.Schema(), Lease: cfg.Lease, PollInterval: cfg.PollInterval})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		stores = append(stores, s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	acked := make(chan struct{}, 1)
	done := make(chan struct{})
	for _, s := range stores {
		go func() {
			defer func() { done <- struct{}{} }()
			for ctx.Err() == nil {
				ds, err := s.Receive(ctx, 64)
				if err == nil && len(ds) > 0 && s.Ack(ctx, ds) == nil {
					acked <- struct{}{}
				}
			}
		}()
	}
	defer func() {
		cancel()
		for range stores {
			<-done
		}
	}()
	waitListening(b, first.Schema(), replicas)
	herdPublish(b, first, "warm", acked)
	count := func() (trips, stmts int64) {
		for _, s := range stores {
			trips, stmts = trips+s.RoundTrips(), stmts+s.Statements()
		}
		return trips, stmts
	}
	trips, stmts := count()
	b.ResetTimer()
	for i := range b.N {
		herdPublish(b, first, fmt.Sprint("m-", i), acked)
	}
	b.StopTimer()
	t, st := count()
	b.ReportMetric(float64(t-trips)/float64(b.N), "trips/dlv")
	b.ReportMetric(float64(st-stmts)/float64(b.N), "stmts/dlv")
}

// herdPublish publishes message id and waits until a receiver acked it.
func herdPublish(b *testing.B, s *pgstore.Store, id string, acked <-chan struct{}) {
	if err := s.Publish(context.Background(), []transport.Envelope{{ID: id, Type: "t", Body: []byte(`{}`)}}); err != nil {
		b.Fatal(err)
	}
	select {
	case <-acked:
	case <-time.After(time.Minute):
		b.Fatalf("%s was not received within a minute", id)
	}
}

// waitListening waits until n sessions of schema's deployment have run
// LISTEN.
func waitListening(b *testing.B, schema string, n int) {
	conn := schemaConn(b, schema)
	for deadline := time.Now().Add(time.Minute); ; {
		var got int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query = 'LISTEN idem_queue'`,
			pgstore.ApplicationName(schema)).Scan(&got); err != nil {
			b.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d receivers listening after a minute", got, n)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
}

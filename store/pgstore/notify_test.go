package pgstore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// Commits that enqueue wake the receivers of another process with at most
// one NOTIFY per spacing: the first at once, and the ones that follow
// within the spacing by one deferred NOTIFY, which still wakes a receiver
// waiting for them (its poll is an hour).
func TestCommitsThatEnqueueShareTheirNotifications(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := openStore(t, pgstore.Config{PollInterval: time.Hour})
	const spacing = 3 * time.Second
	pgstore.SetNotifySpacing(a, spacing)
	b, err := pgstore.Open(ctx, testenv.PostgresURL(t), &pgstore.Config{Schema: a.Schema(), PollInterval: time.Hour})
	if err != nil {
		t.Fatalf("open a second store on schema %s: %v", a.Schema(), err)
	}
	defer b.Close()

	listen, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := listen.Exec(ctx, "LISTEN idem_queue"); err != nil {
		t.Fatal(err)
	}
	// Stopped before the connection and the store close.
	gctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
		_ = listen.Close(context.Background())
	}()
	notes := make(chan string, 100)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			n, err := listen.WaitForNotification(gctx)
			if err != nil {
				return
			}
			if n.Payload == a.Schema() {
				notes <- n.Payload
			}
		}
	}()

	got := make(chan string, 10)
	receiving := make(chan int64, 100) // b's pool acquisitions before each Receive
	go func() {
		defer wg.Done()
		for gctx.Err() == nil {
			receiving <- b.Pool().Stat().AcquireCount()
			ds, err := b.Receive(gctx, 10)
			for _, d := range ds {
				got <- d.Envelope.ID
			}
			if err == nil && len(ds) > 0 {
				_ = b.Ack(gctx, ds)
			}
		}
	}()

	enqueue := func(id string) {
		t.Helper()
		uow, err := a.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := uow.(store.QueueUnitOfWork).Enqueue(ctx, []transport.Envelope{{ID: id, Type: "t", CorrelationID: id}}); err != nil {
			t.Fatal(err)
		}
		if err := uow.Commit(ctx, &store.Changes{}); err != nil {
			t.Fatal(err)
		}
	}
	// The first commit's NOTIFY goes at once: the other process receives
	// the message, then waits again (its listener's connection the only
	// one it holds, after a claim that found nothing).
	<-receiving
	enqueue("m-0")
	select {
	case <-got:
	case <-ctx.Done():
		t.Fatal("the other process did not receive the first message within a minute, its poll an hour")
	}
	acquired := <-receiving // its next Receive is called
	// It goes back to waiting after its claim, one statement (the claim
	// and the next visible time together) on a connection of the pool.
	for st := b.Pool().Stat(); st.AcquiredConns() != 1 || st.AcquireCount() < acquired+1; st = b.Pool().Stat() {
		if ctx.Err() != nil {
			t.Fatal("the other process did not go back to waiting")
		}
		runtime.Gosched()
	}
	// The next commits come within the spacing: one deferred NOTIFY
	// wakes the other process to all of them.
	const commits = 5
	for i := 1; i < commits; i++ {
		enqueue(fmt.Sprintf("m-%d", i))
	}
	seen := map[string]bool{"m-0": true}
	for len(seen) < commits {
		select {
		case id := <-got:
			seen[id] = true
		case <-ctx.Done():
			t.Fatalf("the other process received %d of %d messages within a minute, its poll an hour: a commit's notification was lost", len(seen), commits)
		}
	}
	if n := len(notes); n > 2 {
		t.Errorf("%d commits within %v sent %d notifications by the time the other process had every message, want at most 2 (the first at once, one deferred)", commits, spacing, n)
	}
}

// Commits sent at once share one NOTIFY: the first request is sent at
// once, the others wait for the next, an hour away here.
func TestConcurrentCommitsShareOneNotification(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := openStore(t, pgstore.Config{PollInterval: time.Hour})
	pgstore.SetNotifySpacing(a, time.Hour)
	listen, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Close(context.Background())
	if _, err := listen.Exec(ctx, "LISTEN idem_queue"); err != nil {
		t.Fatal(err)
	}
	const commits = 4
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range commits {
		uow, err := a.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := uow.(store.QueueUnitOfWork).Enqueue(ctx, []transport.Envelope{{ID: fmt.Sprintf("c-%d", i), Type: "t", CorrelationID: fmt.Sprintf("c-%d", i)}}); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := uow.Commit(ctx, &store.Changes{}); err != nil {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	// The first NOTIFY comes from the notifier after the commits; then a
	// sentinel, sent after it, tells when every NOTIFY sent before has
	// arrived (PostgreSQL delivers notifications in commit order).
	next := func() string {
		note, err := listen.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("waiting for a notification: %v", err)
		}
		return note.Payload
	}
	n := 0
	for n == 0 {
		if next() == a.Schema() {
			n++
		}
	}
	if _, err := listen.Exec(ctx, "SELECT pg_notify('idem_queue', 'sentinel')"); err != nil {
		t.Fatal(err)
	}
	for p := next(); p != "sentinel"; p = next() {
		if p == a.Schema() {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d commits sent at once sent %d NOTIFYs, want 1", commits, n)
	}
}

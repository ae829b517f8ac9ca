package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// A replica's share of the queue hands out its own partition's messages
// first; the others' only once its own has none, and only those visible
// for StealAfter; an empty claim is one round trip and says when the next
// claimable message is due.
func TestReceiveShareTakesItsOwnPartitionFirst(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, pgstore.Config{Lease: 30 * time.Second})
	var envs []transport.Envelope
	want := map[int][]string{}
	for i := range 40 {
		env := transport.Envelope{ID: fmt.Sprintf("m%02d", i), Type: "t", CorrelationID: fmt.Sprintf("key-%d", i)}
		p := transport.ShareOf(transport.PartitionKey(&env), 2)
		want[p] = append(want[p], env.ID)
		envs = append(envs, env)
	}
	if len(want[0]) == 0 || len(want[1]) == 0 {
		t.Fatalf("the keys fall in one partition: %v", want)
	}
	if err := s.Publish(ctx, envs); err != nil {
		t.Fatal(err)
	}
	ids := func(ds []transport.Delivery) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Envelope.ID)
		}
		slices.Sort(out)
		return out
	}
	own := transport.Share{Part: 0, Parts: 2, StealAfter: time.Hour}
	// Claimed without Receive's listener, whose LISTEN would count in the
	// round trips below.
	ds, _, err := pgstore.ClaimShare(ctx, s, 100, own)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(ds); !slices.Equal(got, want[0]) {
		t.Fatalf("share 0 of 2 received %v, want its own partition's %v", got, want[0])
	}
	trips := s.RoundTrips()
	ds, next, err := pgstore.ClaimShare(ctx, s, 100, own)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 0 {
		t.Fatalf("share 0 of 2 took %v from partition 1, visible for less than StealAfter", ids(ds))
	}
	if n := s.RoundTrips() - trips; n != 1 {
		t.Errorf("an empty claim cost %d round trips, want 1", n)
	}
	// Its own messages are leased for 30 s; the others are stealable in
	// an hour: the next claimable is the lease's end.
	if d := time.Until(next); d < 20*time.Second || d > 40*time.Second {
		t.Errorf("next claimable in %v, want about the 30 s lease", d)
	}
	ds, err = s.ReceiveShare(ctx, 100, func() transport.Share { return transport.Share{Part: 0, Parts: 2} })
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(ds); !slices.Equal(got, want[1]) {
		t.Fatalf("share 0 of 2 with its own partition empty stole %v, want partition 1's %v", got, want[1])
	}
}

// One share of one is the whole queue, and a share out of range is
// refused with a message naming it.
func TestReceiveShareOfOneIsTheQueue(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, pgstore.Config{Lease: 30 * time.Second})
	if err := s.Publish(ctx, []transport.Envelope{{ID: "a", Type: "t", CorrelationID: "x"}, {ID: "b", Type: "t", CorrelationID: "y"}}); err != nil {
		t.Fatal(err)
	}
	ds, err := s.ReceiveShare(ctx, 10, func() transport.Share { return transport.Share{Parts: 1, StealAfter: time.Hour} })
	if err != nil || len(ds) != 2 {
		t.Fatalf("share of one: %d deliveries, %v; want both", len(ds), err)
	}
	if _, err := s.ReceiveShare(ctx, 10, func() transport.Share { return transport.Share{Part: 2, Parts: 2} }); err == nil {
		t.Fatal("share 2 of 2 accepted")
	}
}

// A share with nothing of its own to claim waits until another share's
// message is old enough to steal, not longer and not in a loop.
func TestReceiveShareWaitsUntilItCanSteal(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, pgstore.Config{Lease: 30 * time.Second})
	env := transport.Envelope{ID: "m", Type: "t"}
	for i := 0; transport.ShareOf(transport.PartitionKey(&env), 2) != 1; i++ {
		env.CorrelationID = fmt.Sprintf("key-%d", i)
	}
	if err := s.Publish(ctx, []transport.Envelope{env}); err != nil {
		t.Fatal(err)
	}
	ds, next, err := pgstore.ClaimShare(ctx, s, 10, transport.Share{Part: 0, Parts: 2, StealAfter: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 0 {
		t.Fatalf("took %s, visible for less than StealAfter", ds[0].Envelope.ID)
	}
	if d := time.Until(next); d < 3*time.Second || d > 6*time.Second {
		t.Errorf("next claimable in %v, want about StealAfter (5 s) after the message became visible", d)
	}
	// Without a steal the share never leaves its partition: nothing is due.
	if _, next, err := pgstore.TakeOnce(ctx, s, 10, 0, 2); err != nil || !next.IsZero() {
		t.Errorf("partition 0 of 2 without a steal: next %v, %v; want none", next, err)
	}
}

// A share's claim reads the queue's index in order: it does not sort the
// whole queue, which the planner chose for a remainder of the hash (it
// took one row in 200 to match, whatever the divisor).
func TestReceiveShareReadsTheIndex(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, pgstore.Config{Lease: 30 * time.Second})
	var envs []transport.Envelope
	for i := range 5000 {
		envs = append(envs, transport.Envelope{ID: fmt.Sprintf("m%d", i), Type: "t", CorrelationID: fmt.Sprintf("key-%d", i%1000)})
	}
	if err := s.Publish(ctx, envs); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `ANALYZE idem_queue`); err != nil {
		t.Fatal(err)
	}
	plan, err := pgstore.ExplainShare(ctx, s, 64, transport.Share{Part: 3, Parts: 16, StealAfter: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The plan of the CTE own, the claim of the share's own messages.
	own, _, _ := strings.Cut(plan, "CTE stolen")
	_, own, _ = strings.Cut(own, "CTE own")
	if strings.Contains(own, "Seq Scan") || strings.Contains(own, "Sort") || !strings.Contains(own, "Index Scan using idem_queue_visible") {
		t.Errorf("a share's claim does not read the index idem_queue_visible in order:\n%s", plan)
	}
}

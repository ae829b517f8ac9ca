package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/admit"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// The FlowQueueFair cases check store.ReceiveParams.Fair: fair share and
// priority, with admit.FairWindow as the reference.

func init() {
	featureCases = append(featureCases,
		featureCase{"FlowQueueFairQuietShareProgresses", needAdmit, testFlowQueueFairQuietShareProgresses},
		featureCase{"FlowQueueFairMatchesReference", needAdmit, testFlowQueueFairMatchesReference},
		featureCase{"FlowQueueFairPriorityKeepsKeyOrder", needAdmit, testFlowQueueFairPriorityKeepsKeyOrder},
		featureCase{"FlowQueueFairUnderCap", needAdmit, testFlowQueueFairUnderCap},
		featureCase{"FlowQueueReportsAdmissionWait", needAdmit, testFlowQueueReportsAdmissionWait},
		featureCase{"FairWaitingShares", needAdmit, testFairWaitingShares},
		featureCase{"FlowQueueFairLongKey", needAdmit, testFlowQueueFairLongKey},
	)
}

// fairMessage returns a message of saga key corr in share with these
// weight and priority headers ("" leaves one out).
func fairMessage(id, corr, share, weight, prio string) transport.Envelope {
	env := message(id, corr)
	for h, v := range map[string]string{transport.HeaderFairnessKey: share, transport.HeaderFairnessWeight: weight, transport.HeaderPriority: prio} {
		if v != "" {
			env.Headers[h] = v
		}
	}
	return env
}

// receiveFair calls ReceiveAdmitted in fair order once.
func receiveFair(t *testing.T, q store.AdmittingQueue, lim map[string]store.Limit, max int) []transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), promptWait)
	defer cancel()
	ds, err := q.ReceiveAdmitted(ctx, &store.ReceiveParams{Max: max, Limits: lim, Needs: needsOf, Fair: true})
	if err != nil {
		t.Fatalf("fair receive: got error %v, want deliveries within %v", err, promptWait)
	}
	return ds
}

func testFlowQueueFairQuietShareProgresses(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	var flood []transport.Envelope
	for i := range 40 {
		flood = append(flood, fairMessage(fmt.Sprint("a-", i), fmt.Sprint("ka-", i), "tenant-a", "", ""))
	}
	publish(t, q, flood...)
	publish(t, q, fairMessage("b-0", "kb-0", "tenant-b", "", ""), fairMessage("b-1", "kb-1", "tenant-b", "", ""))
	// 40 of tenant a are ahead in the queue; in fair order the first four
	// places alternate between the shares.
	wantIDs(t, "the first fair batch", receiveFair(t, q, nil, 4), 1, "a-0", "a-1", "b-0", "b-1")
	wantIDs(t, "the next", receiveFair(t, q, nil, 2), 1, "a-2", "a-3")
}

func testFlowQueueFairMatchesReference(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	r := rand.New(rand.NewPCG(7, uint64(len(t.Name()))))
	weights := []string{"", "1", "2", "3", "0", "+2", "99999", "x"} // the last four read as 1 or clamped
	prios := []string{"", "0", "1", "5", "-3", "101", "-1000", "1e2", "<script>"}
	var envs []transport.Envelope
	for i := range 60 {
		envs = append(envs, fairMessage(fmt.Sprintf("m-%02d", i), fmt.Sprint("k-", r.IntN(15)),
			fmt.Sprint("s-", r.IntN(4)), weights[r.IntN(len(weights))], prios[r.IntN(len(prios))]))
	}
	publish(t, q, envs...)
	left := slices.Clone(envs)
	var c admit.FairClock
	for round := 0; len(left) > 0; round++ {
		want := fairFirst(left, 7, &c)
		got := receiveFair(t, q, nil, 7)
		wantIDs(t, fmt.Sprintf("fair receive %d", round), got, 1, want...)
		if err := q.Ack(t.Context(), got); err != nil { // before their leases run out
			t.Fatal(err)
		}
		left = slices.DeleteFunc(left, func(e transport.Envelope) bool { return slices.Contains(want, e.ID) })
	}
}

// fairFirst returns the IDs of the first n of envs (the visible messages,
// in queue order) that a fair receive of n admits under c, with no limit
// (admit.FairWindow over a window of admit.WindowPerDelivery × n),
// sorted, and advances c as their admission does.
func fairFirst(envs []transport.Envelope, n int, c *admit.FairClock) []string {
	rows := make([]admit.FairRow, len(envs))
	seen := map[string]int{}
	for i := range envs {
		k := transport.PartitionKey(&envs[i])
		rows[i] = admit.FairRow{PartKey: k, Fairness: transport.FairnessOf(&envs[i]), Earlier: seen[k]}
		seen[k]++
	}
	var ids []string
	win := admit.FairWindow(rows, c, admit.WindowPerDelivery*n)
	for _, r := range win[:min(n, len(win))] {
		ids = append(ids, envs[r.Index].ID)
		c.Served(r.Share, r.Weight)
	}
	slices.Sort(ids)
	return ids
}

func testFlowQueueFairPriorityKeepsKeyOrder(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	var backlog []transport.Envelope
	for i := range 20 {
		backlog = append(backlog, fairMessage(fmt.Sprintf("m-%02d", i), fmt.Sprint("k-", i), "", "", ""))
	}
	publish(t, q, backlog...)
	// An urgent message overtakes the backlog; one of a key with an
	// earlier message waiting takes that message along, never overtaking
	// it.
	publish(t, q, fairMessage("urgent", "u", "", "", "50"), fairMessage("m-urgent", "k-7", "", "", strconv.Itoa(transport.MaxPriority)))
	wantIDs(t, "urgent first", receiveFair(t, q, nil, 3), 1, "m-07", "m-urgent", "urgent")
}

func testFlowQueueFairUnderCap(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	ctx := context.Background()
	capA := limits(store.Limit{Name: "a", Concurrency: 1})
	var envs []transport.Envelope
	for i := range 10 {
		envs = append(envs, limited(fmt.Sprint("a-", i), fmt.Sprint("ka-", i), "a"))
		envs[i].Headers[transport.HeaderFairnessKey] = "tenant-a"
	}
	publish(t, q, envs...)
	publish(t, q, fairMessage("b-0", "kb-0", "tenant-b", "", ""))
	// Tenant a's share is capped at one in flight: its refusals do not
	// keep tenant b out.
	got := receiveFair(t, q, capA, 5)
	wantIDs(t, "under a's cap", got, 1, "a-0", "b-0")
	if err := q.Ack(ctx, got); err != nil {
		t.Fatalf("ack: %v", err)
	}
	wantIDs(t, "after the release", receiveFair(t, q, capA, 5), 1, "a-1")
}

func testFlowQueueReportsAdmissionWait(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	ctx := context.Background()
	start := time.Now()
	publish(t, q, limited("m-1", "k-1", "api"), limited("m-2", "k-2", "api"))
	first := receiveAdmitted(t, q, apiCap1, 10, promptWait)
	wantIDs(t, "the first", first, 1, "m-1")
	if !first[0].Admitted || first[0].Waited < 0 {
		t.Fatalf("m-1: Admitted %v, Waited %v: want an admitted delivery with a wait of 0 or more", first[0].Admitted, first[0].Waited)
	}
	// m-2 waits behind the cap at least as long as the refused receive.
	const held = 300 * time.Millisecond
	expectNoAdmission(t, q, apiCap1, "m-2 behind the cap", held)
	if err := q.Ack(ctx, first); err != nil {
		t.Fatal(err)
	}
	second := receiveAdmitted(t, q, apiCap1, 10, promptWait)
	wantIDs(t, "after the release", second, 1, "m-2")
	if w := second[0].Waited; !second[0].Admitted || w < held-50*time.Millisecond || w > time.Since(start)+time.Second {
		t.Fatalf("m-2: Admitted %v, Waited %v: want at least %v (held behind the cap) and at most %v (since its publish)", second[0].Admitted, w, held, time.Since(start))
	}
	publish(t, q, message("m-3", "k-3"))
	if d := receive(t, q, 1, promptWait); d[0].Admitted || d[0].Waited != 0 {
		t.Fatalf("a plain receive: Admitted %v, Waited %v: want neither", d[0].Admitted, d[0].Waited)
	}
}

func testFairWaitingShares(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	r, ok := s.(store.FairShareReader)
	if !ok {
		t.Fatalf("%T is an AdmittingQueue but no store.FairShareReader", s)
	}
	hostile := "<script>alert(1)</script>\u00e9"
	var envs []transport.Envelope
	for i := range 3 {
		envs = append(envs, fairMessage(fmt.Sprint("a-", i), fmt.Sprint("ka-", i), "acme", "", ""))
	}
	envs = append(envs, fairMessage("h-0", "kh-0", hostile, "", ""), fairMessage("h-1", "kh-1", hostile, "", ""), message("n-0", "kn-0"))
	publish(t, q, envs...)
	wantIDs(t, "one leased", receive(t, q, 1, promptWait), 1, "a-0")
	got, total, err := r.WaitingShares(t.Context(), 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.ShareWaiting{{Share: hostile, Waiting: 2}, {Share: "acme", Waiting: 2}} // "<" sorts before "a"
	if !slices.Equal(got, want) || total != 3 {
		t.Fatalf("WaitingShares(2): got %+v of %d shares, want %+v of 3 (the leased one not waiting; ties by share)", got, total, want)
	}
}

// A fairness key longer than any index takes (3,000 bytes) is served,
// and counted, like any other: the stores keep it whole or as a digest.
func testFlowQueueFairLongKey(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	long := strings.Repeat("tenant-\u00e9-", 300)
	publish(t, q, fairMessage("l-0", "kl-0", long, "", ""), fairMessage("l-1", "kl-1", long, "", ""), fairMessage("s-0", "ks-0", "short", "", ""))
	wantIDs(t, "a long key's share beside a short one's", receiveFair(t, q, nil, 2), 1, "l-0", "s-0")
	wantIDs(t, "the next", receiveFair(t, q, nil, 2), 1, "l-1")
	if r, ok := s.(store.FairShareReader); ok {
		publish(t, q, fairMessage("l-2", "kl-2", long, "", ""))
		if got, total, err := r.WaitingShares(t.Context(), 5); err != nil || total != 1 || len(got) != 1 || got[0].Waiting != 1 {
			t.Fatalf("WaitingShares with a long key: got %+v of %d, %v; want one share with one waiting", got, total, err)
		}
	}
}

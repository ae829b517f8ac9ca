package admit

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/idemhq/idem/transport"
)

func row(part, share string, weight, prio int) FairRow {
	return FairRow{PartKey: part, Fairness: transport.Fairness{Key: share, Weight: weight, Priority: prio}}
}

// order is FairOrder's indexes under a new clock.
func order(rows []FairRow) []int {
	var out []int
	for _, r := range FairOrder(rows, &FairClock{}) {
		out = append(out, r.Index)
	}
	return out
}

func TestFairOrderAlternatesOneAtATime(t *testing.T) {
	var rows []FairRow
	for i := range 6 {
		rows = append(rows, row(fmt.Sprint("a", i), "flood", 1, 0))
	}
	rows = append(rows, row("b0", "quiet", 1, 0), row("b1", "quiet", 1, 0), row("c0", "heavy", 2, 0), row("c1", "heavy", 2, 0), row("c2", "heavy", 2, 0))
	// One admission per receive: the clock carries the rounds over.
	c := &FairClock{}
	var got []string
	for len(rows) > 0 {
		first := FairOrder(rows, c)[0]
		got = append(got, rows[first.Index].PartKey)
		c.Served(first.Share, first.Weight)
		rows = slices.Delete(rows, first.Index, first.Index+1)
	}
	want := []string{"a0", "b0", "c0", "c1", "a1", "b1", "c2", "a2", "a3", "a4", "a5"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// A share that comes back after idling joins the current round.
	c.Served("late", 1)
	if f := c.Finish["late"]; f != c.V+1 {
		t.Fatalf("a new share's finish: got %v, want V+1 = %v", f, c.V+1)
	}
}

func TestFairOrderServesSharesRoundRobin(t *testing.T) {
	var rows []FairRow
	for i := range 6 {
		rows = append(rows, row(fmt.Sprint("a", i), "flood", 1, 0))
	}
	rows = append(rows, row("b0", "quiet", 1, 0), row("b1", "quiet", 1, 0))
	got := order(rows)
	want := []int{0, 6, 1, 7, 2, 3, 4, 5}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v (the quiet share's two messages served in the first two rounds)", got, want)
	}
}

func TestFairOrderWeighsShares(t *testing.T) {
	var rows []FairRow
	for i := range 4 {
		rows = append(rows, row(fmt.Sprint("a", i), "light", 1, 0))
	}
	for i := range 6 {
		rows = append(rows, row(fmt.Sprint("b", i), "heavy", 3, 0))
	}
	got := order(rows)
	want := []int{0, 4, 5, 6, 1, 7, 8, 9, 2, 3}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v (three of the weight-3 share per round)", got, want)
	}
}

func TestFairOrderPriorityWithinShareTakesItsKeyAlong(t *testing.T) {
	rows := []FairRow{
		row("k1", "", 1, 0),
		row("k2", "", 1, 0),
		row("k3", "", 1, 0), // k3's first message, priority 0...
		row("k3", "", 1, 9), // ...its second urgent: both go first, in order
		row("k4", "", 1, 5),
	}
	got := order(rows)
	want := []int{2, 3, 4, 0, 1}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestFairOrderKeepsEachKeysQueueOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		rows := make([]FairRow, 1+r.IntN(60))
		for i := range rows {
			rows[i] = row(fmt.Sprint("k", r.IntN(8)), fmt.Sprint("s", r.IntN(3)), 1+r.IntN(4), r.IntN(5)-2)
		}
		got := order(rows)
		if len(got) != len(rows) {
			t.Fatalf("trial %d: %d indexes for %d rows", trial, len(got), len(rows))
		}
		last := map[string]int{}
		for _, i := range got {
			k := rows[i].PartKey
			if j, ok := last[k]; ok && j > i {
				t.Fatalf("trial %d: key %s's message %d comes after its message %d: order %v", trial, k, j, i, got)
			}
			last[k] = i
		}
	}
}

func TestFairnessOfIsLenientAndValidateNamesTheHeader(t *testing.T) {
	env := &transport.Envelope{Headers: map[string]string{
		transport.HeaderFairnessKey:    "t<script>",
		transport.HeaderFairnessWeight: "0042",
		transport.HeaderPriority:       "-7",
	}}
	if f := transport.FairnessOf(env); f != (transport.Fairness{Key: "t<script>", Weight: 42, Priority: -7}) {
		t.Fatalf("FairnessOf: got %+v", f)
	}
	for _, bad := range []map[string]string{
		{transport.HeaderFairnessWeight: "0"},
		{transport.HeaderFairnessWeight: "+3"},
		{transport.HeaderFairnessWeight: "2000"},
		{transport.HeaderPriority: "101"},
		{transport.HeaderPriority: "1e2"},
		{transport.HeaderPriority: "\xff"},
	} {
		env := &transport.Envelope{Headers: bad}
		if err := transport.ValidateFairness(env); err == nil {
			t.Errorf("ValidateFairness(%q): got nil, want an error", bad)
		}
		f := transport.FairnessOf(env)
		if f.Weight < 1 || f.Weight > transport.MaxFairnessWeight || f.Priority < transport.MinPriority || f.Priority > transport.MaxPriority {
			t.Errorf("FairnessOf(%q): got %+v, out of bounds", bad, f)
		}
	}
}

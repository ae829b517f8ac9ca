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

// counted sets each row's Earlier: every row is visible.
func counted(rows []FairRow) []FairRow {
	seen := map[string]int{}
	for i := range rows {
		rows[i].Earlier = seen[rows[i].PartKey]
		seen[rows[i].PartKey]++
	}
	return rows
}

// order is FairWindow's indexes under a new clock, the window as large
// as the rows.
func order(rows []FairRow) []int {
	var out []int
	for _, r := range FairWindow(counted(rows), &FairClock{}, len(rows)) {
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
		first := FairWindow(counted(rows), c, len(rows))[0]
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

func TestFairWindowKeepsEachKeysQueueOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		rows := make([]FairRow, 1+r.IntN(60))
		for i := range rows {
			rows[i] = row(fmt.Sprint("k", r.IntN(8)), fmt.Sprint("s", r.IntN(3)), 1+r.IntN(4), r.IntN(5)-2)
		}
		counted(rows)
		n := 1 + r.IntN(len(rows))
		got := FairWindow(rows, &FairClock{V: float64(r.IntN(3)), Finish: map[string]float64{"s1": 2.5}}, n)
		if len(got) > n {
			t.Fatalf("trial %d: a window of %d for n=%d", trial, len(got), n)
		}
		// Each key's rows in the window are its first visible ones, in
		// queue order.
		next := map[string]int{}
		for _, g := range got {
			k := rows[g.Index].PartKey
			if rows[g.Index].Earlier != next[k] {
				t.Fatalf("trial %d: key %s's row %d (its message %d) comes after %d of its messages: window %v", trial, k, g.Index, rows[g.Index].Earlier, next[k], got)
			}
			next[k]++
		}
	}
}

func TestFairWindowLeavesOutWhatWouldOvertake(t *testing.T) {
	// k's first message sits deep in share a's backlog; its second,
	// urgent, is a head of share b: it waits for the first.
	rows := []FairRow{row("k", "a", 1, 0)}
	for i := range 5 {
		rows = append(rows, row(fmt.Sprint("x", i), "a", 1, 5))
	}
	rows = append(rows, row("k", "b", 1, 9), row("y", "b", 1, 0))
	got := FairWindow(counted(rows), &FairClock{}, 3)
	var ids []int
	for _, g := range got {
		ids = append(ids, g.Index)
	}
	if want := []int{1, 2, 7}; !slices.Equal(ids, want) { // at start 1, x1 (priority 5) before y
		t.Fatalf("got %v, want %v (k's urgent message left out behind its first)", ids, want)
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

func TestServedAllIsServedInOrder(t *testing.T) {
	var one, all FairClock
	rs := []FairRank{{Share: "b", Weight: 1}, {Share: "a", Weight: 2}, {Share: "b", Weight: 1}}
	for _, r := range rs {
		one.Served(r.Share, r.Weight)
	}
	shares, finish := all.ServedAll(rs)
	if !slices.Equal(shares, []string{"a", "b"}) || all.V != one.V || finish[0] != one.Finish["a"] || finish[1] != one.Finish["b"] {
		t.Fatalf("ServedAll: shares %v finish %v V %v; one by one: %+v", shares, finish, all.V, one)
	}
}

package admit

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

var t0 = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

func TestDecideRate(t *testing.T) {
	k := store.LimitKey{Name: "r"}
	lim := map[string]store.Limit{"r": {Name: "r", Rate: 10, Burst: 2}}
	reqs := []store.AdmitRequest{{Holder: "a", Keys: []store.LimitKey{k}}, {Holder: "b", Keys: []store.LimitKey{k}}, {Holder: "c", Keys: []store.LimitKey{k}}}
	cs := map[store.LimitKey]*Counter{k: {Fresh: true}}
	adm, holds := Decide(lim, reqs, cs, t0)
	if !adm[0].Admitted || !adm[1].Admitted || adm[2].Admitted {
		t.Fatalf("got %+v, want the first two admitted", adm)
	}
	if adm[2].Wait != 100*time.Millisecond {
		t.Errorf("wait: got %v, want 100ms", adm[2].Wait)
	}
	if holds[0] != nil {
		t.Errorf("a rate holds no slot: got %v", holds[0])
	}
	// 100ms later exactly one token is back.
	adm, _ = Decide(lim, reqs[2:], cs, t0.Add(adm[2].Wait))
	if !adm[0].Admitted {
		t.Fatalf("after the wait: got %+v, want admitted", adm[0])
	}
	// A bucket never holds more than Burst.
	cs[k].Tokens, cs[k].RefilledAt = 0, t0
	adm, _ = Decide(lim, reqs, cs, t0.Add(time.Hour))
	if !adm[0].Admitted || !adm[1].Admitted || adm[2].Admitted {
		t.Fatalf("after an hour: got %+v, want two admitted (Burst 2)", adm)
	}
}

func TestDecideQueueBlocksLaterOfARefusedKey(t *testing.T) {
	c := store.LimitKey{Name: "c"}
	lim := map[string]store.Limit{"c": {Name: "c", Concurrency: 1}}
	cands := []Candidate{
		{Holder: "1", PartKey: "x", Keys: []store.LimitKey{c}},
		{Holder: "2", PartKey: "y", Keys: []store.LimitKey{c}}, // refused: c is full
		{Holder: "3", PartKey: "y"},                            // needs nothing, but behind 2
		{Holder: "4", PartKey: "z"},
		{Holder: "5", PartKey: "w"}, // over max
	}
	cs := map[store.LimitKey]*Counter{c: {}}
	d := DecideQueue(lim, cands, cs, t0, 2)
	if len(d.Admitted) != 2 || d.Admitted[0] != 0 || d.Admitted[1] != 3 {
		t.Fatalf("admitted: got %v, want [0 3]", d.Admitted)
	}
	if len(d.Holds[0]) != 1 || d.Holds[0][0] != c || d.Holds[1] != nil {
		t.Errorf("holds: got %v, want [[c] []]", d.Holds)
	}
	if cs[c].Live != 1 {
		t.Errorf("live: got %d, want 1", cs[c].Live)
	}
	// 2 refused by c, 3 behind it waits for c too; 5 was never decided.
	if want := []Refusal{{Index: 1, By: c}, {Index: 2, By: c}}; !slices.Equal(d.Refusals, want) {
		t.Errorf("refusals: got %v, want %v", d.Refusals, want)
	}
}

func TestKeysSortedDistinctGoverned(t *testing.T) {
	lim := map[string]store.Limit{"b": {Concurrency: 1}, "a": {Rate: 1}, "off": {}}
	reqs := []store.AdmitRequest{
		{Keys: []store.LimitKey{{Name: "b", Key: "2"}, {Name: "a"}, {Name: "off"}, {Name: "none"}}},
		{Keys: []store.LimitKey{{Name: "b", Key: "1"}, {Name: "a"}}},
	}
	got := Keys(lim, reqs)
	want := []store.LimitKey{{Name: "a"}, {Name: "b", Key: "1"}, {Name: "b", Key: "2"}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

// TestQueuePagesCarryBlockedKeys checks that a key refused on one page
// stays blocked on the next, that Admitted indexes every page as one
// list, and that max bounds the admissions over all pages.
func TestQueuePagesCarryBlockedKeys(t *testing.T) {
	lim := map[string]store.Limit{"api": {Name: "api", Concurrency: 1}}
	api := store.LimitKey{Name: "api"}
	cs := map[store.LimitKey]*Counter{api: {Live: 1}}
	now := time.Now()
	var d QueueDecision
	d.Page(lim, []Candidate{{Holder: "a", PartKey: "k", Keys: []store.LimitKey{api}}, {Holder: "b", PartKey: "x", Keys: []store.LimitKey{api}}}, cs, now, 2)
	if !d.MorePages(1, 2, 2) {
		t.Fatalf("after a full page admitting nothing: MorePages got false, want true")
	}
	d.Page(lim, []Candidate{{Holder: "c", PartKey: "k"}, {Holder: "d", PartKey: "y"}, {Holder: "e", PartKey: "z"}, {Holder: "f", PartKey: "w"}}, cs, now, 2)
	if want := []int{3, 4}; !slices.Equal(d.Admitted, want) {
		t.Errorf("admitted: got %v, want %v (c blocked behind a of its key, max 2)", d.Admitted, want)
	}
	if want := []Refusal{{Index: 0, By: api}, {Index: 1, By: api}, {Index: 2, By: api}}; !slices.Equal(d.Refusals, want) {
		t.Errorf("refusals: got %v, want %v (c, on page 2, waits for a's counter)", d.Refusals, want)
	}
	if d.MorePages(2, 4, 2) {
		t.Errorf("MorePages with max admitted: got true, want false")
	}
	if (&QueueDecision{}).MorePages(MaxPages, 4, 1) {
		t.Errorf("MorePages after MaxPages pages: got true, want false")
	}
	if (&QueueDecision{}).MorePages(2, 4*2-1, 2) {
		t.Errorf("MorePages after a page of 7 of its window of 8: got true, want false")
	}
}

// TestPageWindow checks that the first page of an admitting receive is
// the batch it may return, so that a limit that never binds locks and
// reads no message it does not lease, and that later pages widen.
func TestPageWindow(t *testing.T) {
	for _, c := range []struct{ page, max, want int }{{1, 64, 64}, {2, 64, 4 * 64}, {MaxPages, 1, 4}} {
		if got := PageWindow(c.page, c.max); got != c.want {
			t.Errorf("PageWindow(%d, %d) = %d, want %d", c.page, c.max, got, c.want)
		}
	}
}

// TestCoveringFullEndsPaging checks that a page after which a Covering
// counter admits nothing more (its cap reached, or no whole token) ends
// the paging, that one with room left does not, and that Exhausted
// changes no counter.
func TestCoveringFullEndsPaging(t *testing.T) {
	now := time.Now()
	lim := map[string]store.Limit{"api": {Name: "api", Concurrency: 2}, "rate": {Name: "rate", Rate: 1, Burst: 1}}
	api, rate := store.LimitKey{Name: "api"}, store.LimitKey{Name: "rate"}
	page := func(covering []string, live int, tokens float64, n int, need store.LimitKey) *QueueDecision {
		cs := map[store.LimitKey]*Counter{api: {Live: live}, rate: {Tokens: tokens, RefilledAt: now}}
		var cands []Candidate
		for i := range n {
			cands = append(cands, Candidate{Holder: fmt.Sprint("h", i), PartKey: fmt.Sprint("k", i), Keys: []store.LimitKey{need}})
		}
		d := &QueueDecision{Covering: covering}
		d.Page(lim, cands, cs, now, n)
		return d
	}
	if d := page([]string{"api"}, 0, 1, 4, api); d.MorePages(1, 4, 4) {
		t.Errorf("cap 2 filled by a page of 4: MorePages got true, want false (admitted %v)", d.Admitted)
	}
	if d := page(nil, 0, 1, 4, api); !d.MorePages(1, 4, 4) {
		t.Errorf("cap 2 filled, no Covering: MorePages got false, want true")
	}
	if d := page([]string{"rate"}, 0, 1.5, 4, rate); d.MorePages(1, 4, 4) {
		t.Errorf("covering rate left with half a token after a page: MorePages got true, want false (admitted %v)", d.Admitted)
	}
	// A full page with refusals by api (at its cap, not covering) and
	// tokens of the covering rate left: paging goes on.
	cs := map[store.LimitKey]*Counter{api: {Live: 2}, rate: {Tokens: 5, RefilledAt: now}}
	d := &QueueDecision{Covering: []string{"rate"}}
	wide := map[string]store.Limit{"api": lim["api"], "rate": {Name: "rate", Rate: 1, Burst: 10}}
	d.Page(wide, []Candidate{{Holder: "a", PartKey: "k", Keys: []store.LimitKey{api, rate}}, {Holder: "b", PartKey: "k", Keys: []store.LimitKey{rate}},
		{Holder: "c", PartKey: "x", Keys: []store.LimitKey{rate}}, {Holder: "d", PartKey: "y", Keys: []store.LimitKey{rate}}}, cs, now, 4)
	if !d.MorePages(1, 4, 4) {
		t.Errorf("covering rate with tokens left after a page: MorePages got false, want true (admitted %v)", d.Admitted)
	}
	cs = map[store.LimitKey]*Counter{api: {Live: 1}, rate: {Tokens: 1, RefilledAt: now.Add(-time.Second)}}
	if Exhausted(lim, []string{"api", "rate"}, cs, now) {
		t.Errorf("Exhausted with a slot and a token left: got true, want false")
	}
	if c := cs[rate]; c.Refilled || c.Tokens != 1 {
		t.Errorf("Exhausted changed the bucket: %+v", *c)
	}
}

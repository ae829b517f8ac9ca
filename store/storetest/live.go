package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// The cases of the console's list ergonomics: time ranges and backward
// paging of readmodel.InstanceQuerier (the InstanceQuerier subtests), the
// optional readmodel.TimerQuerier and readmodel.QueryCounter.
func init() {
	querierCases = append(querierCases,
		testCase{"QueryInstancesUpdatedBetween", testQueryInstancesUpdatedBetween},
		testCase{"QueryInstancesBackwardPaging", testQueryInstancesBackwardPaging},
		testCase{"QueryInstancesStuckBackwardPaging", testQueryInstancesStuckBackwardPaging},
		testCase{"QueryInstancesBothCursorsRefused", testQueryInstancesBothCursorsRefused},
	)
}

var timerQuerierCases = []testCase{
	{"QueryTimersDueBetween", testQueryTimersDueBetween},
	{"QueryTimersPagingBothWays", testQueryTimersPagingBothWays},
	{"QueryTimersBothCursorsRefused", testQueryTimersBothCursorsRefused},
}

var queryCounterCases = []testCase{
	{"CountInstanceQueryBounded", testCountInstanceQueryBounded},
	{"CountTimerQueryBounded", testCountTimerQueryBounded},
}

func testQueryInstancesUpdatedBetween(t *testing.T, s store.Store) {
	base := seedQuery(t, s) // b/k1 at +0s, a/k2 +1s, a/x1 +2s, a/k1 +3s
	at := func(sec int) time.Time { return base.Add(time.Duration(sec) * time.Second) }
	for _, tc := range []struct {
		name string
		p    readmodel.InstanceQuery
		want []string
	}{
		{"from, inclusive", readmodel.InstanceQuery{UpdatedFrom: at(2)}, []string{"a/k1", "a/x1"}},
		{"before, exclusive", readmodel.InstanceQuery{UpdatedBefore: at(2)}, []string{"a/k2", "b/k1"}},
		{"between", readmodel.InstanceQuery{UpdatedFrom: at(1), UpdatedBefore: at(3)}, []string{"a/k2", "a/x1"}},
		{"between and type", readmodel.InstanceQuery{SagaType: "b", UpdatedFrom: at(1), UpdatedBefore: at(3)}, []string{}},
		{"empty range", readmodel.InstanceQuery{UpdatedFrom: at(3), UpdatedBefore: at(3)}, []string{}},
		{"stuck between", readmodel.InstanceQuery{Stuck: true, UpdatedFrom: at(0), UpdatedBefore: at(3)}, []string{"b/k1", "a/x1"}},
		{"microsecond edge", readmodel.InstanceQuery{UpdatedFrom: at(3).Add(time.Microsecond)}, []string{}},
	} {
		if got := query(t, s, &tc.p); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// pageBack follows Before cursors from the end of a listing to its
// start, pages of limit, and returns the keys in the query's order.
func pageBack(t *testing.T, s store.Store, p readmodel.InstanceQuery, last *store.Instance) []string {
	t.Helper()
	q := s.(readmodel.InstanceQuerier)
	got := []string{}
	p.Before = readmodel.CursorOf(last)
	for range 10 {
		page, err := q.QueryInstances(t.Context(), &p)
		if err != nil {
			t.Fatalf("query instances before %+v: got error %v, want nil", p.Before, err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > p.Limit {
			t.Fatalf("page of limit %d holds %d instances", p.Limit, len(page))
		}
		got = append(instanceKeys(page), got...)
		p.Before = readmodel.CursorOf(page[0])
	}
	return got
}

func testQueryInstancesBackwardPaging(t *testing.T, s store.Store) {
	seedQuery(t, s)
	all, err := s.(readmodel.InstanceQuerier).QueryInstances(t.Context(), &readmodel.InstanceQuery{})
	if err != nil || len(all) != 4 {
		t.Fatalf("query all: got %d instances, error %v; want 4, nil", len(all), err)
	}
	// Before the last one: the three before it, pages of 2 from the end.
	if got, want := pageBack(t, s, readmodel.InstanceQuery{Limit: 2}, all[3]), []string{"a/k1", "a/k2", "a/x1"}; !slices.Equal(got, want) {
		t.Errorf("pages of 2 before b/k1: got %q, want %q", got, want)
	}
	page := query(t, s, &readmodel.InstanceQuery{Limit: 2, Before: readmodel.CursorOf(all[3])})
	if want := []string{"a/k2", "a/x1"}; !slices.Equal(page, want) {
		t.Errorf("the page of 2 before b/k1: got %q, want %q (the nearest, in key order)", page, want)
	}
	if got := query(t, s, &readmodel.InstanceQuery{Before: readmodel.CursorOf(all[0])}); len(got) != 0 {
		t.Errorf("before the first: got %q, want none", got)
	}
	if got := query(t, s, &readmodel.InstanceQuery{SagaType: "a", KeyPrefix: "k", Before: readmodel.CursorOf(all[3])}); !slices.Equal(got, []string{"a/k1", "a/k2"}) {
		t.Errorf("type a, prefix k, before b/k1: got %q, want [a/k1 a/k2]", got)
	}
}

func testQueryInstancesStuckBackwardPaging(t *testing.T, s store.Store) {
	seedQuery(t, s)
	all, err := s.(readmodel.InstanceQuerier).QueryInstances(t.Context(), &readmodel.InstanceQuery{Stuck: true})
	if err != nil || len(all) != 3 {
		t.Fatalf("query stuck: got %d instances, error %v; want 3, nil", len(all), err)
	}
	if got, want := pageBack(t, s, readmodel.InstanceQuery{Stuck: true, Limit: 1}, all[2]), []string{"b/k1", "a/x1"}; !slices.Equal(got, want) {
		t.Errorf("stuck pages of 1 before a/k1: got %q, want %q", got, want)
	}
}

func testQueryInstancesBothCursorsRefused(t *testing.T, s store.Store) {
	seedQuery(t, s)
	c := &readmodel.InstanceCursor{SagaType: "a", Key: "k2"}
	_, err := s.(readmodel.InstanceQuerier).QueryInstances(t.Context(), &readmodel.InstanceQuery{After: c, Before: c})
	if !errors.Is(err, readmodel.ErrBothCursors) {
		t.Errorf("query with After and Before: got error %v, want readmodel.ErrBothCursors", err)
	}
}

// seedTimers inserts six timers due one second apart from base: t0 of
// a/k1 at +0s, t1 of b/k1 at +1s, ... t5 of b/k3 at +5s (types
// alternating), and returns base.
func seedTimers(t *testing.T, s store.Store) time.Time {
	t.Helper()
	base := now().Add(time.Hour)
	var ts []store.Timer
	for i := range 6 {
		typ := []string{"a", "b"}[i%2]
		ts = append(ts, timer(typ, fmt.Sprintf("k%d", i/2+1), fmt.Sprintf("t%d", i), fmt.Sprintf("timer-env-%d", i), base.Add(time.Duration(i)*time.Second)))
	}
	commit(t, s, &store.Changes{Timers: ts})
	return base
}

func timerNames(ts []store.Timer) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

func queryTimers(t *testing.T, s store.Store, p *readmodel.TimerQuery) []store.Timer {
	t.Helper()
	ts, err := s.(readmodel.TimerQuerier).QueryTimers(t.Context(), p)
	if err != nil {
		t.Fatalf("query timers %+v: got error %v, want nil", p, err)
	}
	return ts
}

func testQueryTimersDueBetween(t *testing.T, s store.Store) {
	base := seedTimers(t, s)
	at := func(sec int) time.Time { return base.Add(time.Duration(sec) * time.Second) }
	for _, tc := range []struct {
		name string
		p    readmodel.TimerQuery
		want []string
	}{
		{"all", readmodel.TimerQuery{}, []string{"t0", "t1", "t2", "t3", "t4", "t5"}},
		{"type", readmodel.TimerQuery{SagaType: "b"}, []string{"t1", "t3", "t5"}},
		{"from, inclusive", readmodel.TimerQuery{DueFrom: at(4)}, []string{"t4", "t5"}},
		{"before, exclusive", readmodel.TimerQuery{DueBefore: at(2)}, []string{"t0", "t1"}},
		{"between", readmodel.TimerQuery{DueFrom: at(1), DueBefore: at(4)}, []string{"t1", "t2", "t3"}},
		{"between and type", readmodel.TimerQuery{SagaType: "a", DueFrom: at(1), DueBefore: at(4)}, []string{"t2"}},
		{"empty range", readmodel.TimerQuery{DueFrom: at(3), DueBefore: at(3)}, []string{}},
		{"unknown type", readmodel.TimerQuery{SagaType: "nope\x00<script>"}, []string{}},
	} {
		if got := timerNames(queryTimers(t, s, &tc.p)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
	got := queryTimers(t, s, &readmodel.TimerQuery{DueFrom: at(5)})
	if len(got) != 1 {
		t.Fatalf("due from +5s: got %d timers, want 1", len(got))
	}
	checkTimer(t, "timer t5 from QueryTimers", got[0], timer("b", "k3", "t5", "timer-env-5", at(5)))
}

func testQueryTimersPagingBothWays(t *testing.T, s store.Store) {
	seedTimers(t, s)
	var fwd []string
	var pages [][]store.Timer
	p := &readmodel.TimerQuery{Limit: 2}
	for range 10 {
		page := queryTimers(t, s, p)
		if len(page) == 0 {
			break
		}
		if len(page) > 2 {
			t.Fatalf("page of limit 2 holds %d timers", len(page))
		}
		pages = append(pages, page)
		fwd = append(fwd, timerNames(page)...)
		p.After = readmodel.TimerCursorOf(&page[len(page)-1])
	}
	if want := []string{"t0", "t1", "t2", "t3", "t4", "t5"}; !slices.Equal(fwd, want) {
		t.Fatalf("forward pages: got %q, want %q", fwd, want)
	}
	// Back from the last page: the pages before it, each the same as
	// forward.
	back := &readmodel.TimerQuery{Limit: 2, Before: readmodel.TimerCursorOf(&pages[2][0])}
	for i := 1; i >= 0; i-- {
		page := queryTimers(t, s, back)
		if got, want := timerNames(page), timerNames(pages[i]); !slices.Equal(got, want) {
			t.Errorf("page %d backwards: got %q, want %q", i, got, want)
		}
		if len(page) == 0 {
			return
		}
		back.Before = readmodel.TimerCursorOf(&page[0])
	}
	if got := queryTimers(t, s, back); len(got) != 0 {
		t.Errorf("before the first timer: got %q, want none", timerNames(got))
	}
	// Before with a type and a range.
	if got := timerNames(queryTimers(t, s, &readmodel.TimerQuery{SagaType: "b", Limit: 1, Before: readmodel.TimerCursorOf(&pages[2][1])})); !slices.Equal(got, []string{"t3"}) {
		t.Errorf("one timer of b before t5: got %q, want [t3]", got)
	}
}

func testQueryTimersBothCursorsRefused(t *testing.T, s store.Store) {
	seedTimers(t, s)
	c := &readmodel.TimerCursor{DueAt: now(), SagaType: "a", Key: "k1", Name: "t0"}
	_, err := s.(readmodel.TimerQuerier).QueryTimers(t.Context(), &readmodel.TimerQuery{After: c, Before: c})
	if !errors.Is(err, readmodel.ErrBothCursors) {
		t.Errorf("query timers with After and Before: got error %v, want readmodel.ErrBothCursors", err)
	}
}

func checkCount(t *testing.T, what string, got readmodel.Count, err error, n int, exact bool) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: got error %v, want nil", what, err)
	}
	if got.N != n || got.Exact != exact {
		t.Errorf("%s: got %+v, want N %d, Exact %v", what, got, n, exact)
	}
	if got.Exact && got.Estimate != 0 {
		t.Errorf("%s: exact count %+v has an estimate, want none", what, got)
	}
}

func testCountInstanceQueryBounded(t *testing.T, s store.Store) {
	base := seedQuery(t, s)
	c := s.(readmodel.QueryCounter)
	for _, tc := range []struct {
		name  string
		p     readmodel.InstanceQuery
		bound int
		n     int
		exact bool
	}{
		{"all, under the bound", readmodel.InstanceQuery{}, 10, 4, true},
		{"all, at the bound", readmodel.InstanceQuery{}, 4, 4, true},
		{"all, over the bound", readmodel.InstanceQuery{}, 3, 3, false},
		{"type a", readmodel.InstanceQuery{SagaType: "a"}, 10, 3, true},
		{"active prefix k", readmodel.InstanceQuery{Status: store.StatusActive, KeyPrefix: "k"}, 10, 2, true},
		{"stuck", readmodel.InstanceQuery{Stuck: true}, 10, 3, true},
		{"stuck over the bound", readmodel.InstanceQuery{Stuck: true}, 1, 1, false},
		{"updated between", readmodel.InstanceQuery{UpdatedFrom: base.Add(time.Second), UpdatedBefore: base.Add(3 * time.Second)}, 10, 2, true},
		{"cursor and limit ignored", readmodel.InstanceQuery{Limit: 1, After: &readmodel.InstanceCursor{SagaType: "a", Key: "x1"}}, 10, 4, true},
		{"none", readmodel.InstanceQuery{State: "Nope"}, 10, 0, true},
		{"hostile prefix", readmodel.InstanceQuery{KeyPrefix: "<script>\x00"}, 10, 0, true},
	} {
		got, err := c.CountInstanceQuery(t.Context(), &tc.p, tc.bound)
		checkCount(t, tc.name, got, err, tc.n, tc.exact)
	}
}

func testCountTimerQueryBounded(t *testing.T, s store.Store) {
	base := seedTimers(t, s)
	c := s.(readmodel.QueryCounter)
	for _, tc := range []struct {
		name  string
		p     readmodel.TimerQuery
		bound int
		n     int
		exact bool
	}{
		{"all", readmodel.TimerQuery{}, 10, 6, true},
		{"all over the bound", readmodel.TimerQuery{}, 5, 5, false},
		{"type b", readmodel.TimerQuery{SagaType: "b"}, 10, 3, true},
		{"due between", readmodel.TimerQuery{DueFrom: base.Add(time.Second), DueBefore: base.Add(4 * time.Second)}, 10, 3, true},
		{"due between over the bound", readmodel.TimerQuery{DueFrom: base.Add(time.Second), DueBefore: base.Add(4 * time.Second)}, 2, 2, false},
		{"none", readmodel.TimerQuery{SagaType: "nope"}, 10, 0, true},
	} {
		got, err := c.CountTimerQuery(t.Context(), &tc.p, tc.bound)
		checkCount(t, tc.name, got, err, tc.n, tc.exact)
	}
}

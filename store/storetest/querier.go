package storetest

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var querierCases = []testCase{
	{"QueryInstancesFilters", testQueryInstancesFilters},
	{"QueryInstancesKeysetPaging", testQueryInstancesKeysetPaging},
	{"QueryInstancesStuckOrder", testQueryInstancesStuckOrder},
	{"QueryInstancesHostileCursor", testQueryInstancesHostileCursor},
	{"CountInstancesByState", testCountInstancesByState},
	{"AttributesStoredInTheSameCommit", testAttributesStoredInTheSameCommit},
	{"AttributesReplacedOnUpdate", testAttributesReplacedOnUpdate},
	{"AttributesFilterAndPaging", testAttributesFilterAndPaging},
	{"AttributesCompareInNFC", testAttributesCompareInNFC},
	{"AttributesHostileQueryMatchesNothing", testAttributesHostileQueryMatchesNothing},
	{"AttributesGoWithSweptInstances", testAttributesGoWithSweptInstances},
}

// seedQuery inserts a/k1 (Started, oldest), a/k2 (Done, finished),
// a/x1 (Waiting), b/k1 (Started, newest), with UpdatedAt one second apart
// in the order k1 of b, x1, k2, k1 of a reversed, so that the stuck order
// differs from the key order.
func seedQuery(t *testing.T, s store.Store) time.Time {
	t.Helper()
	base := now().Add(-time.Hour)
	mk := func(typ, k, state string, age int, finished bool) *store.Instance {
		in := newInstance(typ, k, base.Add(time.Duration(age)*time.Second))
		in.State = state
		if finished {
			in.FinishedAt = in.UpdatedAt
		}
		return in
	}
	commit(t, s, &store.Changes{Inserts: []*store.Instance{
		mk("a", "k1", "Started", 3, false),
		mk("a", "k2", "Done", 1, true),
		mk("a", "x1", "Waiting", 2, false),
		mk("b", "k1", "Started", 0, false),
	}})
	return base
}

func query(t *testing.T, s store.Store, p *readmodel.InstanceQuery) []string {
	t.Helper()
	ins, err := s.(readmodel.InstanceQuerier).QueryInstances(t.Context(), p)
	if err != nil {
		t.Fatalf("query instances %+v: got error %v, want nil", p, err)
	}
	return instanceKeys(ins)
}

func testQueryInstancesFilters(t *testing.T, s store.Store) {
	seedQuery(t, s)
	for _, tc := range []struct {
		name string
		p    readmodel.InstanceQuery
		want []string
	}{
		{"all", readmodel.InstanceQuery{}, []string{"a/k1", "a/k2", "a/x1", "b/k1"}},
		{"type", readmodel.InstanceQuery{SagaType: "a"}, []string{"a/k1", "a/k2", "a/x1"}},
		{"state", readmodel.InstanceQuery{State: "Started"}, []string{"a/k1", "b/k1"}},
		{"active", readmodel.InstanceQuery{Status: store.StatusActive}, []string{"a/k1", "a/x1", "b/k1"}},
		{"finished", readmodel.InstanceQuery{Status: store.StatusFinished}, []string{"a/k2"}},
		{"prefix", readmodel.InstanceQuery{KeyPrefix: "k"}, []string{"a/k1", "a/k2", "b/k1"}},
		{"prefix and type", readmodel.InstanceQuery{SagaType: "a", KeyPrefix: "x"}, []string{"a/x1"}},
		{"prefix is not a pattern", readmodel.InstanceQuery{KeyPrefix: "%"}, []string{}},
		{"no match", readmodel.InstanceQuery{SagaType: "a", State: "Nope"}, []string{}},
	} {
		if got := query(t, s, &tc.p); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func testQueryInstancesKeysetPaging(t *testing.T, s store.Store) {
	seedQuery(t, s)
	q := s.(readmodel.InstanceQuerier)
	var got []string
	p := &readmodel.InstanceQuery{Limit: 1}
	for range 10 {
		page, err := q.QueryInstances(t.Context(), p)
		if err != nil {
			t.Fatalf("query instances: got error %v, want nil", err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 1 {
			t.Fatalf("page of limit 1 holds %d instances", len(page))
		}
		got = append(got, instanceKeys(page)...)
		p.After = readmodel.CursorOf(page[0])
	}
	if want := []string{"a/k1", "a/k2", "a/x1", "b/k1"}; !slices.Equal(got, want) {
		t.Errorf("pages: got %q, want %q", got, want)
	}
}

func testQueryInstancesStuckOrder(t *testing.T, s store.Store) {
	seedQuery(t, s)
	want := []string{"b/k1", "a/x1", "a/k1"} // active only, least recently updated first
	if got := query(t, s, &readmodel.InstanceQuery{Stuck: true}); !slices.Equal(got, want) {
		t.Errorf("stuck: got %q, want %q", got, want)
	}
	q := s.(readmodel.InstanceQuerier)
	var got []string
	p := &readmodel.InstanceQuery{Stuck: true, Limit: 2}
	for range 10 {
		page, err := q.QueryInstances(t.Context(), p)
		if err != nil {
			t.Fatalf("query stuck instances: got error %v, want nil", err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, instanceKeys(page)...)
		p.After = readmodel.CursorOf(page[len(page)-1])
	}
	if !slices.Equal(got, want) {
		t.Errorf("stuck pages of 2: got %q, want %q", got, want)
	}
	if got := query(t, s, &readmodel.InstanceQuery{Stuck: true, SagaType: "a", State: "Started"}); !slices.Equal(got, []string{"a/k1"}) {
		t.Errorf("stuck of a in Started: got %q, want [a/k1]", got)
	}
}

func testCountInstancesByState(t *testing.T, s store.Store) {
	seedQuery(t, s)
	q := s.(readmodel.InstanceQuerier)
	got, err := q.CountInstances(t.Context(), "")
	if err != nil {
		t.Fatalf("count instances: got error %v, want nil", err)
	}
	want := []readmodel.StateCount{
		{SagaType: "a", State: "Done", Status: store.StatusFinished, Count: 1},
		{SagaType: "a", State: "Started", Status: store.StatusActive, Count: 1},
		{SagaType: "a", State: "Waiting", Status: store.StatusActive, Count: 1},
		{SagaType: "b", State: "Started", Status: store.StatusActive, Count: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("count all: got %+v, want %+v", got, want)
	}
	got, err = q.CountInstances(t.Context(), "b")
	if err != nil {
		t.Fatalf("count instances of b: got error %v, want nil", err)
	}
	if !reflect.DeepEqual(got, want[3:]) {
		t.Errorf("count b: got %+v, want %+v", got, want[3:])
	}
}

// A cursor no stored instance can have (NUL, invalid UTF-8: a hand-made
// one) is answered without an error, on every store: the console and the
// API decode cursors that clients send.
func testQueryInstancesHostileCursor(t *testing.T, s store.Store) {
	seedQuery(t, s)
	q := s.(readmodel.InstanceQuerier)
	for _, c := range []readmodel.InstanceCursor{{SagaType: "a\x00", Key: "k"}, {SagaType: "a", Key: "k\xff"}} {
		for _, p := range []readmodel.InstanceQuery{{After: &c}, {Before: &c}, {After: &c, Stuck: true}} {
			if _, err := q.QueryInstances(t.Context(), &p); err != nil {
				t.Errorf("QueryInstances with cursor %q/%q: got error %v, want none", c.SagaType, c.Key, err)
			}
		}
	}
}

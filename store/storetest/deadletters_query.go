package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var deadLetterQuerierCases = []testCase{
	{"QueryDeadLettersFiltersAndPages", testQueryDeadLettersFiltersAndPages},
	{"CountDeadLettersByReason", testCountDeadLettersByReason},
	{"DeadLetterQueryHostileFilterMatchesNothing", testDeadLetterQueryHostile},
	{"DeadLetterMarkSelectsWhatWasCounted", testDeadLetterMark},
	{"DeadLetterHostileMarkIsErrBadMark", testDeadLetterHostileMark},
}

// seedDeadLetters records 24 dead letters d-00 … d-23: saga type "a" for
// even numbers and "b" for odd ones, key k-(i%4), reason malformed_body
// when i%3 == 0 and retries_exhausted otherwise.
func seedDeadLetters(t *testing.T, s store.Store) []store.DeadLetter {
	t.Helper()
	at := now()
	var dls []store.DeadLetter
	for i := range 24 {
		id := fmt.Sprintf("d-%02d", i)
		dl := store.DeadLetter{
			ID: id, Envelope: envelope(id, at), Reason: "retries_exhausted", Error: "e",
			SagaType: "b", Key: fmt.Sprintf("k-%d", i%4), Attempts: 1, FirstFailedAt: at, LastFailedAt: at,
		}
		if i%2 == 0 {
			dl.SagaType = "a"
		}
		if i%3 == 0 {
			dl.Reason = "malformed_body"
		}
		dls = append(dls, dl)
	}
	commit(t, s, &store.Changes{DeadLetters: dls})
	return dls
}

// matching is what filtering every dead letter by q gives, in ID order.
func matching(dls []store.DeadLetter, q readmodel.DeadLetterQuery) []string {
	var ids []string
	for _, d := range dls {
		if (q.SagaType == "" || d.SagaType == q.SagaType) && (q.Key == "" || d.Key == q.Key) && (q.Reason == "" || d.Reason == q.Reason) {
			ids = append(ids, d.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// queryAll pages through q, Limit at a time.
func queryAll(t *testing.T, s store.Store, q readmodel.DeadLetterQuery) []string {
	t.Helper()
	var ids []string
	for range 100 {
		page, err := s.(readmodel.DeadLetterQuerier).QueryDeadLetters(t.Context(), &q)
		if err != nil {
			t.Fatalf("query dead letters %+v: got error %v, want nil", q, err)
		}
		if len(page) == 0 {
			return ids
		}
		if q.Limit > 0 && len(page) > q.Limit {
			t.Fatalf("query dead letters %+v: page of %d, over the limit", q, len(page))
		}
		for _, d := range page {
			ids = append(ids, d.ID)
		}
		q.After = page[len(page)-1].ID
	}
	t.Fatalf("query dead letters %+v: still paging after 100 pages", q)
	return nil
}

func testQueryDeadLettersFiltersAndPages(t *testing.T, s store.Store) {
	dls := seedDeadLetters(t, s)
	for _, q := range []readmodel.DeadLetterQuery{
		{},
		{Limit: 5},
		{SagaType: "a", Limit: 3},
		{Key: "k-2", Reason: "malformed_body", Limit: 1},
		{SagaType: "b", Key: "k-1", Reason: "retries_exhausted", Limit: 2},
		{Reason: "no_such_reason"},
	} {
		got, want := queryAll(t, s, q), matching(dls, q)
		if !slices.Equal(got, want) {
			t.Errorf("query %+v: got %v, want %v (every match, in ID order, each once)", q, got, want)
		}
	}
}

func testCountDeadLettersByReason(t *testing.T, s store.Store) {
	dls := seedDeadLetters(t, s)
	for _, q := range []readmodel.DeadLetterQuery{{}, {Key: "k-0"}, {SagaType: "b", Limit: 1, After: "d-99"}} {
		got, err := s.(readmodel.DeadLetterQuerier).CountDeadLetters(t.Context(), &q)
		if err != nil {
			t.Fatalf("count dead letters %+v: got error %v, want nil", q, err)
		}
		want := map[string]int{}
		f := q
		f.After, f.Limit = "", 0 // ignored by CountDeadLetters
		for _, d := range dls {
			if slices.Contains(matching(dls, f), d.ID) {
				want[d.Reason]++
			}
		}
		if !maps.Equal(got.ByReason, want) {
			t.Errorf("count %+v: got %v, want %v (After and Limit ignored)", q, got, want)
		}
	}
}

func testDeadLetterQueryHostile(t *testing.T, s store.Store) {
	seedDeadLetters(t, s)
	dq := s.(readmodel.DeadLetterQuerier)
	for _, hostile := range []string{"k\x00", "k\xff", "<script>"} {
		if ds, err := dq.QueryDeadLetters(t.Context(), &readmodel.DeadLetterQuery{Key: hostile, Reason: hostile}); err != nil || len(ds) != 0 {
			t.Errorf("query dead letters with key %q: got %d, %v; want none and no error", hostile, len(ds), err)
		}
		if c, err := dq.CountDeadLetters(t.Context(), &readmodel.DeadLetterQuery{SagaType: hostile}); err != nil || len(c.ByReason) != 0 {
			t.Errorf("count dead letters of type %q: got %v, %v; want none and no error", hostile, c, err)
		}
		if _, err := dq.QueryDeadLetters(t.Context(), &readmodel.DeadLetterQuery{AsOf: hostile}); err == nil {
			t.Errorf("query dead letters as of %q: got no error, want one saying it is not a mark", hostile)
		}
	}
}

// hostileMarks are marks no store makes: markup, NUL, invalid UTF-8, a
// snapshot whose xmin follows its xmax, numbers no integer holds.
var hostileMarks = []string{"<script>", "1\x00", "\xff", "5:3:", "0:0:", "5:9:2", "5:9:7,6",
	"99999999999999999999", "99999999999999999999:99999999999999999999:", "-1", " 1", "1:", "1:2:3:4"}

// testDeadLetterHostileMark: a mark the store did not make is refused
// with an error wrapping readmodel.ErrBadMark by every method that takes one,
// before it reaches the database, so callers can say it is bad input.
func testDeadLetterHostileMark(t *testing.T, s store.Store) {
	seedDeadLetters(t, s)
	dq := s.(readmodel.DeadLetterQuerier)
	for _, mark := range hostileMarks {
		if _, err := dq.QueryDeadLetters(t.Context(), &readmodel.DeadLetterQuery{AsOf: mark}); !errors.Is(err, readmodel.ErrBadMark) {
			t.Errorf("query dead letters as of %q: got %v, want an error wrapping readmodel.ErrBadMark", mark, err)
		}
		if _, err := dq.CountDeadLetters(t.Context(), &readmodel.DeadLetterQuery{AsOf: mark}); !errors.Is(err, readmodel.ErrBadMark) {
			t.Errorf("count dead letters as of %q: got %v, want an error wrapping readmodel.ErrBadMark", mark, err)
		}
		if _, err := dq.DeleteDeadLettersAsOf(t.Context(), []string{"d-00"}, mark); !errors.Is(err, readmodel.ErrBadMark) {
			t.Errorf("delete dead letters as of %q: got %v, want an error wrapping readmodel.ErrBadMark", mark, err)
		}
	}
	if _, err := s.GetDeadLetter(t.Context(), "d-00"); err != nil {
		t.Errorf("d-00 after deletes with bad marks: %v, want it kept", err)
	}
}

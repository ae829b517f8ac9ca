package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

func testListInstances(t *testing.T, s store.Store) {
	base := now()
	ctx := t.Context()
	var ins []*store.Instance
	add := func(sagaType, k, state string) {
		in := newInstance(sagaType, k, base)
		in.State = state
		ins = append(ins, in)
	}
	// Inserted out of order, in two commits.
	add("order", "k-03", "Started")
	add("invoice", "k-02", "Started")
	add("order", "k-01", "Started")
	add("order", "k-05", "Done")
	add("invoice", "k-01", "Done")
	add("order", "k-02", "Done")
	add("order", "k-04", "Started")
	commit(t, s, &store.Changes{Inserts: ins[:3]})
	commit(t, s, &store.Changes{Inserts: ins[3:]})

	list := func(what string, p store.ListParams) []*store.Instance {
		t.Helper()
		got, err := s.ListInstances(ctx, &p)
		if err != nil {
			t.Fatalf("%s: got error %v, want nil", what, err)
		}
		return got
	}
	// pages lists every page of p, building each cursor with next.
	pages := func(what string, p store.ListParams, next func(last *store.Instance) string) [][]string {
		t.Helper()
		var out [][]string
		for i := 0; i < 10; i++ {
			got := list(fmt.Sprintf("%s, page %d", what, i+1), p)
			if len(got) > p.Limit {
				t.Fatalf("%s, page %d: got %d instances, want at most Limit %d", what, i+1, len(got), p.Limit)
			}
			if len(got) == 0 {
				return out
			}
			out = append(out, instanceKeys(got))
			p.After = next(got[len(got)-1])
		}
		t.Fatalf("%s: more than 10 pages", what)
		return nil
	}
	checkPages := func(what string, got, want [][]string) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: got %q, want %q", what, got, want)
		}
	}

	all := list("all instances", store.ListParams{Limit: 100})
	checkStrings(t, "all instances", instanceKeys(all), []string{
		"invoice/k-01", "invoice/k-02", "order/k-01", "order/k-02", "order/k-03", "order/k-04", "order/k-05",
	})
	for _, got := range all {
		for _, want := range ins {
			if got.SagaType == want.SagaType && got.Key == want.Key {
				checkInstance(t, "listed "+got.SagaType+"/"+got.Key, got, want)
			}
		}
	}

	byType := func(last *store.Instance) string { return last.Key }
	anyType := func(last *store.Instance) string { return last.SagaType + "\x00" + last.Key }
	checkPages("pages of saga type order, cursor = key",
		pages("order", store.ListParams{SagaType: "order", Limit: 2}, byType),
		[][]string{{"order/k-01", "order/k-02"}, {"order/k-03", "order/k-04"}, {"order/k-05"}})
	checkPages("pages of every saga type, cursor = saga type NUL key",
		pages("all", store.ListParams{Limit: 3}, anyType),
		[][]string{{"invoice/k-01", "invoice/k-02", "order/k-01"}, {"order/k-02", "order/k-03", "order/k-04"}, {"order/k-05"}})
	checkPages("pages of state Started",
		pages("Started", store.ListParams{State: "Started", Limit: 2}, anyType),
		[][]string{{"invoice/k-02", "order/k-01"}, {"order/k-03", "order/k-04"}})
	checkStrings(t, "saga type order in state Done",
		instanceKeys(list("order Done", store.ListParams{SagaType: "order", State: "Done", Limit: 10})),
		[]string{"order/k-02", "order/k-05"})
	checkStrings(t, "unknown saga type", instanceKeys(list("unknown", store.ListParams{SagaType: "nope", Limit: 10})), nil)
}

func testJournal(t *testing.T, s store.Store) {
	base := now()
	ctx := t.Context()
	entry := func(k string, v int64, from, to string) store.JournalEntry {
		return store.JournalEntry{
			SagaType: "order", Key: k, RawKey: " " + k + " ", MessageID: fmt.Sprintf("m-%s-%d", k, v),
			EventType: "Event" + to, FromState: from, ToState: to, Version: v, At: base.Add(time.Duration(v) * time.Second),
		}
	}
	a := []store.JournalEntry{entry("a", 1, "", "Started"), entry("a", 2, "Started", "Paid"), entry("a", 3, "Paid", "Shipped"), entry("a", 4, "Shipped", "Done")}
	b := []store.JournalEntry{entry("b", 1, "", "Started"), entry("b", 2, "Started", "Paid")}
	commit(t, s, &store.Changes{Journal: []store.JournalEntry{a[0], b[0], a[1]}})
	commit(t, s, &store.Changes{Journal: []store.JournalEntry{b[1], a[2]}})
	commit(t, s, &store.Changes{Journal: []store.JournalEntry{a[3]}})

	for _, c := range []struct {
		k    string
		want []store.JournalEntry
	}{{"a", a}, {"b", b}, {"none", nil}} {
		got, err := s.Journal(ctx, key("order", c.k))
		if err != nil {
			t.Fatalf("journal of order/%s: got error %v, want nil", c.k, err)
		}
		if len(got) != len(c.want) {
			t.Errorf("journal of order/%s: got %d entries, want %d", c.k, len(got), len(c.want))
			continue
		}
		for i := range got {
			checkJournalEntry(t, fmt.Sprintf("journal of order/%s, entry %d", c.k, i), got[i], c.want[i])
		}
	}
	if got, err := s.Journal(ctx, key("invoice", "a")); err != nil || len(got) != 0 {
		t.Errorf("journal of invoice/a: got %d entries, %v; want 0, nil", len(got), err)
	}
}

func testDeadLetters(t *testing.T, s store.Store) {
	base := now()
	ctx := t.Context()
	dl := func(id, sagaType string, attempts int) store.DeadLetter {
		return store.DeadLetter{
			ID: id, Envelope: envelope("env-"+id, base), Reason: "malformed_body",
			Error: "decode: unexpected EOF", SagaType: sagaType, Key: "k-" + id, Attempts: attempts,
			FirstFailedAt: base.Add(-time.Minute), LastFailedAt: base,
		}
	}
	d1, d2, d3 := dl("d-1", "order", 1), dl("d-2", "invoice", 2), dl("d-3", "order", 3)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{d3, d1}})
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{d2}})

	list := func(what string, p store.ListParams) []string {
		t.Helper()
		got, err := s.ListDeadLetters(ctx, &p)
		if err != nil {
			t.Fatalf("%s: got error %v, want nil", what, err)
		}
		ids := make([]string, len(got))
		for i, d := range got {
			ids[i] = d.ID
		}
		return ids
	}
	checkStrings(t, "first page", list("first page", store.ListParams{Limit: 2}), []string{"d-1", "d-2"})
	checkStrings(t, "page after d-2", list("page after d-2", store.ListParams{After: "d-2", Limit: 2}), []string{"d-3"})
	checkStrings(t, "page after d-3", list("page after d-3", store.ListParams{After: "d-3", Limit: 2}), nil)
	checkStrings(t, "saga type order", list("saga type order", store.ListParams{SagaType: "order", Limit: 10}), []string{"d-1", "d-3"})

	got, err := s.GetDeadLetter(ctx, "d-2")
	if err != nil {
		t.Fatalf("get d-2: got error %v, want nil", err)
	}
	checkDeadLetter(t, "d-2", *got, d2)
	if got, err := s.GetDeadLetter(ctx, "no-such-id"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get missing dead letter: got %+v, %v; want an error wrapping store.ErrNotFound", got, err)
	}

	// Recording the same ID again replaces the dead letter but keeps the
	// earliest FirstFailedAt.
	again := dl("d-1", "order", 5)
	firstFailed := again.FirstFailedAt
	again.Reason = "handler_failed"
	again.Error = "charge: card declined"
	again.FirstFailedAt = base
	again.LastFailedAt = base.Add(time.Minute)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{again}})
	got, err = s.GetDeadLetter(ctx, "d-1")
	if err != nil {
		t.Fatalf("get d-1 after replacing: got error %v, want nil", err)
	}
	again.FirstFailedAt = firstFailed
	checkDeadLetter(t, "d-1 after replacing", *got, again)
	checkStrings(t, "all after replacing", list("all after replacing", store.ListParams{Limit: 10}), []string{"d-1", "d-2", "d-3"})

	n, err := s.DeleteDeadLetters(ctx, []string{"d-1", "no-such-id", "d-3"})
	if err != nil || n != 2 {
		t.Fatalf("delete d-1, no-such-id, d-3: got %d, %v; want 2, nil", n, err)
	}
	if _, err := s.GetDeadLetter(ctx, "d-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get deleted d-1: got error %v, want one wrapping store.ErrNotFound", err)
	}
	checkStrings(t, "all after delete", list("all after delete", store.ListParams{Limit: 10}), []string{"d-2"})
	n, err = s.DeleteDeadLetters(ctx, []string{"d-1"})
	if err != nil || n != 0 {
		t.Errorf("delete d-1 again: got %d, %v; want 0, nil", n, err)
	}
}

func testDeadLettersRepeatedInOneCommit(t *testing.T, s store.Store) {
	base := now()
	ctx := t.Context()
	dl := func(reason string, attempts int, first, last time.Time) store.DeadLetter {
		return store.DeadLetter{
			ID: "d-1", Envelope: envelope("env-"+reason, base), Reason: reason, Error: "error of " + reason,
			SagaType: "order", Key: "k-" + reason, Attempts: attempts, FirstFailedAt: first, LastFailedAt: last,
		}
	}
	// The earlier record failed first; the later one carries the latest
	// attempt. One commit records both, as a batch that dead-letters two
	// copies of one message does.
	earlier := dl("malformed_body", 1, base.Add(-time.Hour), base.Add(-time.Hour))
	later := dl("handler_failed", 3, base.Add(-time.Minute), base)
	if err := tryCommit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{earlier, later}}); err != nil {
		t.Fatalf("commit of two dead letters with one ID: got error %v, want nil (the later replaces the earlier)", err)
	}
	got, err := s.GetDeadLetter(ctx, "d-1")
	if err != nil {
		t.Fatalf("get d-1: got error %v, want nil", err)
	}
	want := later
	want.FirstFailedAt = earlier.FirstFailedAt
	checkDeadLetter(t, "d-1 recorded twice in one commit", *got, want)

	// Against a stored one, the earliest FirstFailedAt of all three is kept.
	third := dl("timeout", 4, base, base.Add(time.Minute))
	fourth := dl("expired", 5, base, base.Add(2*time.Minute))
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{third, fourth}})
	got, err = s.GetDeadLetter(ctx, "d-1")
	if err != nil {
		t.Fatalf("get d-1 after a second commit: got error %v, want nil", err)
	}
	want = fourth
	want.FirstFailedAt = earlier.FirstFailedAt
	checkDeadLetter(t, "d-1 recorded twice more over a stored one", *got, want)
	dls, err := s.ListDeadLetters(ctx, &store.ListParams{Limit: 10})
	if err != nil || len(dls) != 1 {
		t.Errorf("list dead letters: got %d, %v; want 1, nil", len(dls), err)
	}
}

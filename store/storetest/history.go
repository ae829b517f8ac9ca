package storetest

import (
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// historyCases are the contract lines of issue 25's history: a journal
// entry's detail round trip and the outbox's sent state by ID. They run
// with the other testCases (init appends them, which keeps this slice out
// of Run's list).
var historyCases = []testCase{
	{"JournalDetailRoundTrip", testJournalDetailRoundTrip},
	{"JournalDetailHostile", testJournalDetailHostile},
	{"OutboxSentByID", testOutboxSentByID},
}

func init() { testCases = append(testCases, historyCases...) }

// A journal entry's detail reads back as written, and an entry without
// detail reads back without any (nil payload, headers, emitted and diff).
func testJournalDetailRoundTrip(t *testing.T, s store.Store) {
	at := now()
	plain := store.JournalEntry{SagaType: "order", Key: "d", MessageID: "m-1", EventType: "orders.Placed", FromState: "Initial", ToState: "Open", Version: 1, At: at}
	// full builds the entry afresh each time, so that what the store was
	// given and what it is compared with share no memory.
	full := func() store.JournalEntry {
		return store.JournalEntry{SagaType: "order", Key: "d", MessageID: "m-2", EventType: "orders.Paid", FromState: "Open", ToState: "Paid", Version: 2, At: at,
			JournalDetail: store.JournalDetail{
				Payload: []byte(`{"amount":42}`), PayloadTruncated: true,
				Headers: map[string]string{"traceparent": "00-abc-01", "x-tenant": "t1"}, HeadersTruncated: true,
				CausationID: "m-1", CorrelationID: "corr-1",
				Emitted: []store.EmittedMessage{{ID: "e-2", Type: "orders.Ship"}, {ID: "e-1", Type: "orders.Receipt"}},
				Diff:    []byte(`[{"op":"replace","path":"/paid","value":true}]`), DiffTruncated: true,
				State: []byte(`{"paid":true}`), StateTruncated: true,
				Duration: 1500 * time.Microsecond, Actor: "token:ops",
			}}
	}
	given := full()
	commit(t, s, &store.Changes{Journal: []store.JournalEntry{plain, given}})
	// The store keeps its own copy: changing what was committed changes nothing.
	given.Payload[0], given.Headers["x-tenant"], given.Emitted[0].ID = 'Y', "changed", "changed"
	got, err := s.Journal(t.Context(), key("order", "d"))
	if err != nil {
		t.Fatalf("Journal: %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("journal: got %d entries, want 2", len(got))
	}
	checkJournalEntry(t, "entry without detail", got[0], plain)
	checkJournalEntry(t, "entry with detail", got[1], full())
	// The store keeps its own copy: changing what was read changes nothing.
	got[1].Payload[0], got[1].Headers["x-tenant"], got[1].Emitted[0].ID = 'X', "changed", "changed"
	again, err := s.Journal(t.Context(), key("order", "d"))
	if err != nil {
		t.Fatalf("Journal again: %v", err)
	}
	checkJournalEntry(t, "entry with detail, read again after mutating a read copy", again[1], full())
}

// Hostile strings in a journal entry's detail survive byte for byte on
// every store: U+0000, invalid UTF-8 and markup in the payload, headers,
// IDs, emitted messages and actor.
func testJournalDetailHostile(t *testing.T, s store.Store) {
	const nul, bad, script = "a\x00b", "\xff\xfe\xc3(", "<script>alert(1)</script>"
	e := store.JournalEntry{SagaType: "order", Key: "h", MessageID: "m-1", EventType: "orders.Placed", FromState: "Initial", ToState: "Open", Version: 1, At: now(),
		JournalDetail: store.JournalDetail{
			Payload:     []byte(nul + bad + script),
			Headers:     map[string]string{"x-nul" + nul: nul, "x-bad" + bad: bad, "x-script": script},
			CausationID: nul + bad, CorrelationID: script + bad,
			Emitted:  []store.EmittedMessage{{ID: "e" + nul, Type: script}, {ID: "e" + bad, Type: bad}},
			Diff:     []byte(`[{"op":"add","path":"/x","value":"` + script + `\u0000"}]` + bad),
			State:    []byte(`{"x":"` + script + `\u0000"}` + nul + bad),
			Duration: time.Nanosecond, Actor: nul + bad + script,
		}}
	commit(t, s, &store.Changes{Journal: []store.JournalEntry{e}})
	got, err := s.Journal(t.Context(), key("order", "h"))
	if err != nil {
		t.Fatalf("Journal: %v", err)
	}
	if len(got) != 1 {
		t.Fatalf("journal: got %d entries, want 1", len(got))
	}
	checkJournalEntry(t, "hostile entry", got[0], e)
}

// OutboxSent tells a sent message from an unsent one by ID, and leaves out
// an ID the outbox does not hold.
func testOutboxSentByID(t *testing.T, s store.Store) {
	r, ok := s.(readmodel.OutboxSentReader)
	if !ok {
		t.Skip("the store is not a readmodel.OutboxSentReader: the console shows emitted messages' sent state as unknown")
	}
	base := now()
	commit(t, s, &store.Changes{Outbox: []store.OutboxMessage{
		{Envelope: envelope("o-sent", base), CreatedAt: base},
		{Envelope: envelope("o-unsent", base), CreatedAt: base},
	}})
	sentAt := base.Add(time.Second)
	markSent(t, s, sentAt, "o-sent")
	got, err := r.OutboxSent(t.Context(), []string{"o-sent", "o-unsent", "o-missing"})
	if err != nil {
		t.Fatalf("OutboxSent: %v", err)
	}
	if at, ok := got["o-sent"]; !ok || !at.Equal(sentAt) {
		t.Errorf("o-sent: got %v (present %v), want %v", at, ok, sentAt)
	}
	if at, ok := got["o-unsent"]; !ok || !at.IsZero() {
		t.Errorf("o-unsent: got %v (present %v), want present with a zero time", at, ok)
	}
	if at, ok := got["o-missing"]; ok {
		t.Errorf("o-missing: got %v, want absent", at)
	}
	if empty, err := r.OutboxSent(t.Context(), nil); err != nil || len(empty) != 0 {
		t.Errorf("OutboxSent(nil): got %v, %v; want an empty map and nil", empty, err)
	}
}

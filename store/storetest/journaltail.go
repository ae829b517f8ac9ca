package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// journalTailCases are the contract lines of readmodel.JournalTailer: the
// latest entries of one journal and its length, what the console's
// instance page reads. They run with the other testCases (init appends
// them, which keeps this slice out of Run's list).
var journalTailCases = []testCase{
	{"JournalTail", testJournalTail},
	{"JournalTailHostileKeys", testJournalTailHostileKeys},
}

func init() { testCases = append(testCases, journalTailCases...) }

func tailer(t *testing.T, s store.Store) readmodel.JournalTailer {
	t.Helper()
	jt, ok := s.(readmodel.JournalTailer)
	if !ok {
		t.Skip("the store is not a readmodel.JournalTailer: the console reads the whole journal for the instance page")
	}
	return jt
}

// checkTail reads the latest n entries of k and compares them, and the
// total, with the end of want.
func checkTail(t *testing.T, jt readmodel.JournalTailer, k store.Key, n int, want []store.JournalEntry) {
	t.Helper()
	got, total, err := jt.JournalTail(t.Context(), k, n)
	if err != nil {
		t.Fatalf("JournalTail(%q/%q, %d): got error %v, want nil", k.SagaType, k.Key, n, err)
	}
	if total != len(want) {
		t.Errorf("JournalTail(%q/%q, %d): total %d, want %d", k.SagaType, k.Key, n, total, len(want))
	}
	tail := want[max(0, len(want)-max(n, 0)):]
	if len(got) != len(tail) {
		t.Fatalf("JournalTail(%q/%q, %d): got %d entries, want %d", k.SagaType, k.Key, n, len(got), len(tail))
	}
	for i := range got {
		checkJournalEntry(t, fmt.Sprintf("JournalTail(%q/%q, %d), entry %d", k.SagaType, k.Key, n, i), got[i], tail[i])
	}
}

// The latest n entries, oldest first, in the order Journal returns them
// (entries of one commit sharing a version keep their order), with the
// journal's length; n larger than the journal returns all of it, n <= 0
// only the length, and a missing saga nothing.
func testJournalTail(t *testing.T, s store.Store) {
	jt := tailer(t, s)
	base := now()
	entry := func(k string, i int, v int64) store.JournalEntry {
		e := store.JournalEntry{
			SagaType: "order", Key: k, RawKey: " " + k + " ", MessageID: fmt.Sprintf("m-%s-%02d", k, i),
			EventType: fmt.Sprintf("Event%d", i), FromState: fmt.Sprintf("S%d", i), ToState: fmt.Sprintf("S%d", i+1),
			Version: v, At: base.Add(time.Duration(i) * time.Second),
		}
		if i%3 == 2 { // the last entry of order/a (i = 11) among them
			e.Payload, e.CausationID = []byte(fmt.Sprintf(`{"i":%d}`, i)), fmt.Sprintf("c-%d", i)
			e.Emitted = []store.EmittedMessage{{ID: fmt.Sprintf("e-%d", i), Type: "orders.Ship"}}
			e.State, e.StateTruncated = fmt.Appendf(nil, `{"n":%d}`, i), i%2 == 0
		}
		return e
	}
	// Twelve entries of order/a in six commits, two per commit sharing the
	// version, the IDs out of alphabetical order; order/b's interleaved.
	var a, b []store.JournalEntry
	for c := range 6 {
		x, y := entry("a", 2*c, int64(c+1)), entry("a", 2*c+1, int64(c+1))
		x.MessageID, y.MessageID = fmt.Sprintf("m-z-%d", c), fmt.Sprintf("m-a-%d", c)
		z := entry("b", c, int64(c+1))
		a, b = append(a, x, y), append(b, z)
		commit(t, s, &store.Changes{Journal: []store.JournalEntry{x, z, y}})
	}
	for _, n := range []int{1, 2, 3, 5, 11, 12, 13, 1000} {
		checkTail(t, jt, key("order", "a"), n, a)
	}
	checkTail(t, jt, key("order", "b"), 4, b)
	checkTail(t, jt, key("order", "a"), 0, a)
	checkTail(t, jt, key("order", "a"), -1, a)
	checkTail(t, jt, key("order", "none"), 5, nil)
	checkTail(t, jt, key("invoice", "a"), 5, nil)
	checkTail(t, jt, key("order", ""), 5, nil)
	// The store keeps its own copy: changing what was read changes nothing.
	got, _, err := jt.JournalTail(t.Context(), key("order", "a"), 1)
	if err != nil || len(got) != 1 || len(got[0].Emitted) == 0 {
		t.Fatalf("JournalTail(order/a, 1): got %+v, %v; want the last entry, with what it emitted", got, err)
	}
	got[0].Emitted[0].ID, got[0].Payload[0] = "changed", 'X'
	checkTail(t, jt, key("order", "a"), 1, a)
}

// Keys with markup, U+0000 and invalid UTF-8: an entry a store keeps reads
// back byte for byte; a key the store refused, or never saw, selects no
// entry without an error.
func testJournalTailHostileKeys(t *testing.T, s store.Store) {
	jt := tailer(t, s)
	base := now()
	for i, k := range []string{"<script>alert(1)</script>", "a\x00b", "\xff\xfe\xc3(", "'; DROP TABLE idem_journal; --"} {
		e := store.JournalEntry{SagaType: "order", Key: k, RawKey: k, MessageID: fmt.Sprintf("m-%d", i), EventType: "E", ToState: "S", Version: 1, At: base}
		var want []store.JournalEntry
		if err := tryCommit(t, s, &store.Changes{Journal: []store.JournalEntry{e}}); err == nil {
			want = []store.JournalEntry{e}
		}
		checkTail(t, jt, key("order", k), 5, want)
		checkTail(t, jt, key("order", k+"\x00"), 5, nil)
		checkTail(t, jt, key("order\x00", k), 5, nil)
	}
}

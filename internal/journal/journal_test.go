package journal_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/history"
	"github.com/idemhq/idem/internal/journal"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

func TestTruncateKeepsRunes(t *testing.T) {
	got, cut := journal.Truncate([]byte("aé"), 2) // é is 2 bytes: cutting at 2 would split it
	if string(got) != "a" || !cut {
		t.Errorf("journal.Truncate(aé, 2): got %q (truncated %v), want \"a\" (truncated true)", got, cut)
	}
	got, cut = journal.Truncate([]byte("abc"), 3)
	if string(got) != "abc" || cut {
		t.Errorf("journal.Truncate(abc, 3): got %q (truncated %v), want \"abc\" (truncated false)", got, cut)
	}
}

func TestDetailOffKeepsIDsOnly(t *testing.T) {
	msg := &transport.Envelope{ID: "m", Body: []byte(`{"x":1}`), Headers: map[string]string{"h": "v"}, CausationID: "c", CorrelationID: "r"}
	d := journal.Detail(&journal.Step{Msg: msg, After: []byte(`{"x":1}`), Emitted: []transport.Envelope{{ID: "e", Type: "T"}}, Duration: time.Millisecond, Limit: -1})
	if d.Payload != nil || d.Headers != nil || d.State != nil || d.Diff != nil {
		t.Errorf("capture off: got payload %q, headers %v, state %q, diff %q; want none", d.Payload, d.Headers, d.State, d.Diff)
	}
	if d.CausationID != "c" || d.CorrelationID != "r" || len(d.Emitted) != 1 || d.Emitted[0].ID != "e" || d.Duration != time.Millisecond {
		t.Errorf("capture off: got %+v, want the IDs, the emitted message and the duration kept", d)
	}
	d = journal.Detail(&journal.Step{Msg: msg, After: []byte(`{"y":2}`), Limit: 4})
	if string(d.Payload) != `{"x"` || !d.PayloadTruncated || d.Headers["h"] != "v" || d.HeadersTruncated {
		t.Errorf("limit 4: got payload %q (truncated %v), headers %v (truncated %v); want {\"x\" truncated, h=v whole", d.Payload, d.PayloadTruncated, d.Headers, d.HeadersTruncated)
	}
	if string(d.State) != `{"y"` || !d.StateTruncated || d.Diff != nil {
		t.Errorf("limit 4: got state %q (truncated %v), diff %q; want {\"y\" truncated and no diff (a reader computes it)", d.State, d.StateTruncated, d.Diff)
	}
}

// BenchmarkDetail measures what journaling a typical step's detail costs
// the engine: a 0.5 KiB JSON payload with two headers, one emitted
// message, and a state of five fields of which two change; and, as
// "read", what computing that step's diff costs a reader of the history
// (FillDiffs), which the step no longer pays.
func BenchmarkDetail(b *testing.B) {
	msg := &transport.Envelope{ID: "m", Type: "orders.Paid", Body: []byte(`{"order_id":"o-1","amount":4200,"currency":"EUR","note":"` + strings.Repeat("n", 420) + `"}`),
		Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x-tenant": "acme"}, CausationID: "c", CorrelationID: "o-1"}
	before := []byte(`{"order_id":"o-1","items":3,"amount":4200,"paid":false,"status":"awaiting"}`)
	after := []byte(`{"order_id":"o-1","items":3,"amount":4200,"paid":true,"status":"paid"}`)
	emitted := []transport.Envelope{{ID: "e-1", Type: "orders.Ship"}}
	for _, limit := range []int{-1, 4096} {
		b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = journal.Detail(&journal.Step{Msg: msg, After: after, Emitted: emitted, Duration: time.Millisecond, Limit: limit})
			}
		})
	}
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			js := []store.JournalEntry{{Version: 1, JournalDetail: store.JournalDetail{State: before}}, {Version: 2, JournalDetail: store.JournalDetail{State: after}}}
			history.FillDiffs(js[:], 4096)
		}
	})
}

package history

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
)

func TestDiff(t *testing.T) {
	for _, tt := range []struct {
		name          string
		before, after string
		limit         int
		want          string
		wantTruncated bool
	}{
		{"change", `{"a":1,"b":"x"}`, `{"a":2,"b":"x"}`, 4096, `[{"op":"replace","path":"/a","value":2}]`, false},
		{"new saga", ``, `{"a":1}`, 4096, `[{"op":"add","path":"/a","value":1}]`, false},
		{"equal", `{"a":1}`, `{"a":1}`, 4096, ``, false},
		{"not JSON", `{"a":1}`, `not json`, 4096, ``, false},
		{"cut to the ops that fit", `{}`, `{"a":1,"b":"` + strings.Repeat("x", 20) + `"}`, 40, `[{"op":"add","path":"/a","value":1}]`, true},
		{"null value kept", `{"a":1}`, `{"a":null}`, 4096, `[{"op":"replace","path":"/a","value":null}]`, false},
		{"remove", `{"a":1,"b":2}`, `{"b":2}`, 4096, `[{"op":"remove","path":"/a"}]`, false},
		{"first op too big", `{}`, `{"a":"` + strings.Repeat("x", 100) + `"}`, 40, ``, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, cut := Diff([]byte(tt.before), []byte(tt.after), tt.limit)
			if string(got) != tt.want || cut != tt.wantTruncated {
				t.Errorf("Diff(%s, %s, %d): got %s (truncated %v), want %s (truncated %v)", tt.before, tt.after, tt.limit, got, cut, tt.want, tt.wantTruncated)
			}
		})
	}
}

func TestTruncateKeepsRunes(t *testing.T) {
	got, cut := Truncate([]byte("aé"), 2) // é is 2 bytes: cutting at 2 would split it
	if string(got) != "a" || !cut {
		t.Errorf("Truncate(aé, 2): got %q (truncated %v), want \"a\" (truncated true)", got, cut)
	}
	got, cut = Truncate([]byte("abc"), 3)
	if string(got) != "abc" || cut {
		t.Errorf("Truncate(abc, 3): got %q (truncated %v), want \"abc\" (truncated false)", got, cut)
	}
}

func TestDetailOffKeepsIDsOnly(t *testing.T) {
	msg := &transport.Envelope{ID: "m", Body: []byte(`{"x":1}`), Headers: map[string]string{"h": "v"}, CausationID: "c", CorrelationID: "r"}
	d := Detail(&Step{Msg: msg, After: []byte(`{"x":1}`), Emitted: []transport.Envelope{{ID: "e", Type: "T"}}, Duration: time.Millisecond, Limit: -1})
	if d.Payload != nil || d.Headers != nil || d.Diff != nil {
		t.Errorf("capture off: got payload %q, headers %v, diff %q; want none", d.Payload, d.Headers, d.Diff)
	}
	if d.CausationID != "c" || d.CorrelationID != "r" || len(d.Emitted) != 1 || d.Emitted[0].ID != "e" || d.Duration != time.Millisecond {
		t.Errorf("capture off: got %+v, want the IDs, the emitted message and the duration kept", d)
	}
	d = Detail(&Step{Msg: msg, Limit: 4})
	if string(d.Payload) != `{"x"` || !d.PayloadTruncated || d.Headers["h"] != "v" || d.HeadersTruncated {
		t.Errorf("limit 4: got payload %q (truncated %v), headers %v (truncated %v); want {\"x\" truncated, h=v whole", d.Payload, d.PayloadTruncated, d.Headers, d.HeadersTruncated)
	}
}

// BenchmarkDetail measures what journaling a typical step's detail costs
// the engine: a 0.5 KiB JSON payload with two headers, one emitted
// message, and a state of five fields of which two change.
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
				_ = Detail(&Step{Msg: msg, Before: before, After: after, Emitted: emitted, Duration: time.Millisecond, Limit: limit})
			}
		})
	}
}

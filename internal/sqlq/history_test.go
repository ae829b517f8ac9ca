package sqlq

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// reflectDoc is the document as encoding/json makes it of detailDoc, what
// EncodeJournalDetail wrote before it wrote the JSON by hand.
func reflectDoc(t testing.TB, d *store.JournalDetail) string {
	t.Helper()
	doc := detailDoc{
		PayloadTruncated: d.PayloadTruncated, HeadersTruncated: d.HeadersTruncated, DiffTruncated: d.DiffTruncated, StateTruncated: d.StateTruncated,
		CausationID: bstr(d.CausationID), CorrelationID: bstr(d.CorrelationID), DurationNanos: d.Duration, Actor: bstr(d.Actor),
	}
	keys := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		doc.Headers = append(doc.Headers, [2]bstr{bstr(k), bstr(d.Headers[k])})
	}
	for _, e := range d.Emitted {
		doc.Emitted = append(doc.Emitted, [2]bstr{bstr(e.ID), bstr(e.Type)})
	}
	if reflect.DeepEqual(doc, detailDoc{}) {
		return ""
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hostile are strings that JSON, HTML escaping or UTF-8 treat specially.
var hostile = []string{"", "plain", "k-1", `"quoted"`, `back\slash`, "<script>alert(1)</script>", "a&b", "tab\there", "nl\nx",
	"nul\x00x", "\x7f", "bad\xffutf8", "é", "\u2028\u2029", "\u202e", "\ufffd", "\x1f", "/slash/", strings.Repeat("x", 300)}

// TestEncodeJournalDetailMatchesEncodingJSON holds the hand-written
// encoder to encoding/json's output, byte for byte, so that every reader
// (DecodeJournalDetail, and rows written before) stays right, and checks
// that each document decodes back to its detail.
func TestEncodeJournalDetailMatchesEncodingJSON(t *testing.T) {
	details := []store.JournalDetail{
		{},
		{Payload: []byte(`{"a":1}`), State: []byte(`{"n":1}`)},
		{CorrelationID: "k-158", Headers: map[string]string{"idem-bench-seq": "0"}, Duration: 85787,
			Emitted: []store.EmittedMessage{{ID: "04d7c22d-79b9-8e26-bb1e-d66e3b5f835e", Type: "bench.Incremented"}}},
		{PayloadTruncated: true, HeadersTruncated: true, DiffTruncated: true, StateTruncated: true},
		{Duration: -5},
		{Duration: time.Hour},
	}
	for i, s := range hostile {
		u := hostile[(i+3)%len(hostile)]
		details = append(details,
			store.JournalDetail{CausationID: s, CorrelationID: u, Actor: s + u},
			store.JournalDetail{Headers: map[string]string{s: u, u + "2": s, "z": ""}, HeadersTruncated: i%2 == 0},
			store.JournalDetail{Emitted: []store.EmittedMessage{{ID: s, Type: u}, {ID: u, Type: s}}, Duration: time.Duration(i)},
		)
	}
	for i := range details {
		d := &details[i]
		got, err := EncodeJournalDetail(d)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if want := reflectDoc(t, d); got.Detail != want {
			t.Errorf("%d: EncodeJournalDetail wrote\n%s\nencoding/json writes\n%s", i, got.Detail, want)
		}
		back, err := DecodeJournalDetail(got)
		if err != nil {
			t.Fatalf("%d: decode %q: %v", i, got.Detail, err)
		}
		if len(back.Headers) == 0 {
			back.Headers = nil
		}
		want := *d
		if len(want.Headers) == 0 {
			want.Headers = nil
		}
		if !reflect.DeepEqual(back, want) {
			t.Errorf("%d: round trip gave %+v, want %+v", i, back, want)
		}
	}
}

// BenchmarkEncodeJournalDetail encodes the detail of one of idem bench's
// steps: one header, the correlation ID, one emitted message, the
// duration, a small payload and state.
func BenchmarkEncodeJournalDetail(b *testing.B) {
	d := &store.JournalDetail{Payload: []byte(`{"key":"k-158"}`), State: []byte(`{"n":1}`), CorrelationID: "k-158",
		Headers: map[string]string{"idem-bench-seq": "0"}, Duration: 85787,
		Emitted: []store.EmittedMessage{{ID: "04d7c22d-79b9-8e26-bb1e-d66e3b5f835e", Type: "bench.Incremented"}}}
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = reflectDoc(b, d)
		}
	})
	b.Run("by hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeJournalDetail(d); err != nil {
				b.Fatal(err)
			}
		}
	})
}

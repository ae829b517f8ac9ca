package sqlq

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
)

// FuzzDecodeEnvelope feeds arbitrary metadata and bodies, as a damaged or
// hostile queue row would hold, to DecodeEnvelope: it must never panic,
// and whatever it accepts must survive EncodeEnvelope and DecodeEnvelope
// unchanged, the body byte for byte. Seeds are in testdata/fuzz too.
func FuzzDecodeEnvelope(f *testing.F) {
	good, body, err := EncodeEnvelope(transport.Envelope{ID: "m-1", Type: "orders.Placed", CorrelationID: "o-1",
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, SentAt: time.Unix(1700000000, 5).UTC(), Body: []byte(`{"n":1}`)})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range [][2]string{
		{good, string(body)},
		{`{}`, ``},
		{`{"id": "x", "type": "t", "sent_at": "not a time"}`, `{}`},
		{`{"id": 5}`, ``},
		{`{"headers": {"a": null}}`, "\x00\xff"},
		{`[`, `{"key": "`},
		{`null`, ``},
		{`{"id": "caf\u00e9", "correlation_id": "a\u0000b"}`, `{}`},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, meta, body []byte) {
		e, err := DecodeEnvelope(meta, body)
		if err != nil {
			return
		}
		if !bytes.Equal(e.Body, body) {
			t.Fatalf("body changed: got %q, want %q", e.Body, body)
		}
		meta2, body2, err := EncodeEnvelope(e)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", e, err)
		}
		e2, err := DecodeEnvelope([]byte(meta2), body2)
		if err != nil {
			t.Fatalf("decode of re-encoded %q: %v", meta2, err)
		}
		if len(e.Body) == 0 && len(e2.Body) == 0 {
			e.Body, e2.Body = nil, nil
		}
		if !reflect.DeepEqual(e, e2) {
			t.Fatalf("round trip changed the envelope:\nfirst  %+v\nsecond %+v", e, e2)
		}
	})
}

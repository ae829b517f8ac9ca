package sqlq

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/store"
)

// JournalDetail is a journal entry's detail in its storage form: the
// payload and the diff as bytes, the rest as one JSON document ("" when
// there is nothing to record, stored as NULL).
type JournalDetail struct {
	Payload []byte // nil when empty
	Diff    []byte // nil when empty
	State   []byte // nil when empty
	Detail  string
}

// detailDoc is the JSON document of JournalDetail.Detail. Strings are
// bstr so that invalid UTF-8 survives.
type detailDoc struct {
	PayloadTruncated bool          `json:"payload_truncated,omitempty"`
	Headers          [][2]bstr     `json:"headers,omitempty"`
	HeadersTruncated bool          `json:"headers_truncated,omitempty"`
	CausationID      bstr          `json:"causation_id,omitempty"`
	CorrelationID    bstr          `json:"correlation_id,omitempty"`
	Emitted          [][2]bstr     `json:"emitted,omitempty"`
	DiffTruncated    bool          `json:"diff_truncated,omitempty"`
	StateTruncated   bool          `json:"state_truncated,omitempty"`
	DurationNanos    time.Duration `json:"duration_ns,omitempty"`
	Actor            bstr          `json:"actor,omitempty"`
}

// bstr is a string stored in JSON as a JSON string when it is valid UTF-8
// and as {"b64": "..."} otherwise, which JSON strings cannot carry.
type bstr string

// MarshalJSON implements json.Marshaler.
func (s bstr) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(s)) {
		return json.Marshal(string(s))
	}
	return json.Marshal(map[string]string{"b64": base64.StdEncoding.EncodeToString([]byte(s))})
}

// UnmarshalJSON implements json.Unmarshaler.
func (s *bstr) UnmarshalJSON(b []byte) error {
	if !bytes.HasPrefix(b, []byte("{")) {
		var v string
		err := json.Unmarshal(b, &v)
		*s = bstr(v)
		return err
	}
	var v struct {
		B64 string `json:"b64"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	raw, err := base64.StdEncoding.DecodeString(v.B64)
	*s = bstr(raw)
	return err
}

// EncodeJournalDetail returns d's storage form. The document is the JSON
// that encoding/json makes of detailDoc, byte for byte, written by hand:
// every applied step encodes one, and encoding/json's reflection and its
// per-string MarshalJSON calls were the largest part of the journal's CPU
// on the hot path (docs/benchmarks.md, "Journal detail: what capture costs").
func EncodeJournalDetail(d *store.JournalDetail) (JournalDetail, error) {
	out := JournalDetail{Payload: nonEmpty(d.Payload), Diff: nonEmpty(d.Diff), State: nonEmpty(d.State)}
	if !d.PayloadTruncated && !d.HeadersTruncated && !d.DiffTruncated && !d.StateTruncated && d.CausationID == "" && d.CorrelationID == "" &&
		d.Duration == 0 && d.Actor == "" && len(d.Headers) == 0 && len(d.Emitted) == 0 {
		return out, nil
	}
	var w docWriter
	w.b = make([]byte, 0, detailSize(d))
	w.b = append(w.b, '{')
	w.flag("payload_truncated", d.PayloadTruncated)
	if len(d.Headers) > 0 {
		w.key("headers")
		w.b = append(w.b, '[')
		for i, k := range sortedKeys(d.Headers) {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.pair(k, d.Headers[k])
		}
		w.b = append(w.b, ']')
	}
	w.flag("headers_truncated", d.HeadersTruncated)
	w.str("causation_id", d.CausationID)
	w.str("correlation_id", d.CorrelationID)
	if len(d.Emitted) > 0 {
		w.key("emitted")
		w.b = append(w.b, '[')
		for i, e := range d.Emitted {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.pair(e.ID, e.Type)
		}
		w.b = append(w.b, ']')
	}
	w.flag("diff_truncated", d.DiffTruncated)
	w.flag("state_truncated", d.StateTruncated)
	if d.Duration != 0 {
		w.key("duration_ns")
		w.b = strconv.AppendInt(w.b, int64(d.Duration), 10)
	}
	w.str("actor", d.Actor)
	w.b = append(w.b, '}')
	if w.err != nil {
		return out, fmt.Errorf("encode journal detail: %w", w.err)
	}
	out.Detail = string(w.b)
	return out, nil
}

// detailSize is a capacity for d's document that its usual content fits.
func detailSize(d *store.JournalDetail) int {
	n := 160 + len(d.CausationID) + len(d.CorrelationID) + len(d.Actor)
	for k, v := range d.Headers {
		n += len(k) + len(v) + 8
	}
	for _, e := range d.Emitted {
		n += len(e.ID) + len(e.Type) + 8
	}
	return n
}

// sortedKeys returns h's keys in order.
func sortedKeys(h map[string]string) []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// docWriter appends detailDoc's members, each after a comma but the first.
type docWriter struct {
	b   []byte
	err error
}

func (w *docWriter) key(k string) {
	if len(w.b) > 1 {
		w.b = append(w.b, ',')
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
}

// flag writes a bool member that is omitted when false.
func (w *docWriter) flag(k string, v bool) {
	if v {
		w.key(k)
		w.b = append(w.b, "true"...)
	}
}

// str writes a string member that is omitted when empty.
func (w *docWriter) str(k, v string) {
	if v != "" {
		w.key(k)
		w.value(v)
	}
}

// pair writes ["a","b"].
func (w *docWriter) pair(a, b string) {
	w.b = append(w.b, '[')
	w.value(a)
	w.b = append(w.b, ',')
	w.value(b)
	w.b = append(w.b, ']')
}

// value writes s as bstr's MarshalJSON does: a string of printable ASCII
// that JSON (and encoding/json's HTML escaping) leaves alone as it is,
// anything else through MarshalJSON.
func (w *docWriter) value(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, err := bstr(s).MarshalJSON()
			if err != nil && w.err == nil {
				w.err = err
			}
			w.b = append(w.b, b...)
			return
		}
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, s...)
	w.b = append(w.b, '"')
}

// DecodeJournalDetail joins what EncodeJournalDetail split.
func DecodeJournalDetail(j JournalDetail) (store.JournalDetail, error) {
	d := store.JournalDetail{Payload: nonEmpty(j.Payload), Diff: nonEmpty(j.Diff), State: nonEmpty(j.State)}
	if j.Detail == "" {
		return d, nil
	}
	var doc detailDoc
	if err := json.Unmarshal([]byte(j.Detail), &doc); err != nil {
		return d, fmt.Errorf("decode journal detail: %w", err)
	}
	d.PayloadTruncated, d.HeadersTruncated, d.DiffTruncated, d.StateTruncated = doc.PayloadTruncated, doc.HeadersTruncated, doc.DiffTruncated, doc.StateTruncated
	d.CausationID, d.CorrelationID, d.Duration, d.Actor = string(doc.CausationID), string(doc.CorrelationID), doc.DurationNanos, string(doc.Actor)
	if len(doc.Headers) > 0 {
		d.Headers = make(map[string]string, len(doc.Headers))
		for _, h := range doc.Headers {
			d.Headers[string(h[0])] = string(h[1])
		}
	}
	for _, e := range doc.Emitted {
		d.Emitted = append(d.Emitted, store.EmittedMessage{ID: string(e[0]), Type: string(e[1])})
	}
	return d, nil
}

func nonEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

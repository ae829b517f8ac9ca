package sqlq

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
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

// EncodeJournalDetail returns d's storage form.
func EncodeJournalDetail(d *store.JournalDetail) (JournalDetail, error) {
	out := JournalDetail{Payload: nonEmpty(d.Payload), Diff: nonEmpty(d.Diff), State: nonEmpty(d.State)}
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
	if doc.isZero() {
		return out, nil
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return out, fmt.Errorf("encode journal detail: %w", err)
	}
	out.Detail = string(b)
	return out, nil
}

func (d *detailDoc) isZero() bool {
	return !d.PayloadTruncated && !d.HeadersTruncated && !d.DiffTruncated && !d.StateTruncated && d.CausationID == "" && d.CorrelationID == "" &&
		d.DurationNanos == 0 && d.Actor == "" && len(d.Headers) == 0 && len(d.Emitted) == 0
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

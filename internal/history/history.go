// Package history builds the detail of a journal entry (store.JournalDetail)
// from one applied step: the message's payload and headers, its causation
// and correlation IDs, the messages the step emitted, the state after the
// step and the step's duration, bounded by a byte limit. A reader turns
// the states into RFC 6902 JSON patches (FillDiffs): the step copies
// bytes, and the diff is computed only for a history somebody reads.
package history

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/wI2L/jsondiff"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Step is one applied step, as the engine saw it.
type Step struct {
	// Msg is the message the step applied.
	Msg *transport.Envelope
	// After is the saga's state document after the step.
	After []byte
	// Emitted are the envelopes the step emitted.
	Emitted []transport.Envelope
	// Duration is how long the step took.
	Duration time.Duration
	// Limit bounds, in bytes, the payload, the headers and the diff each
	// (Config.JournalPayloadLimit after its default); below 0 none of the
	// three is captured.
	Limit int
}

// maxActor bounds the actor a message's idem-actor header names, in bytes.
const maxActor = 256

// Detail returns the detail to journal for s. It never fails: a state that
// is not JSON has no diff.
func Detail(s *Step) store.JournalDetail {
	d := store.JournalDetail{CausationID: s.Msg.CausationID, CorrelationID: s.Msg.CorrelationID, Duration: s.Duration}
	if a, _ := Truncate([]byte(s.Msg.Headers[transport.HeaderActor]), maxActor); a != nil {
		d.Actor = string(a) // who sent it from the console or the API
	}
	for i := range s.Emitted {
		d.Emitted = append(d.Emitted, store.EmittedMessage{ID: s.Emitted[i].ID, Type: s.Emitted[i].Type})
	}
	if s.Limit < 0 {
		return d
	}
	d.Payload, d.PayloadTruncated = Truncate(s.Msg.Body, s.Limit)
	d.Headers, d.HeadersTruncated = headers(s.Msg.Headers, s.Limit)
	d.State, d.StateTruncated = Truncate(s.After, s.Limit)
	return d
}

// Truncate returns the first limit bytes of b (cut back to a rune boundary
// when b is UTF-8) and whether it cut anything; nil when b is empty.
func Truncate(b []byte, limit int) ([]byte, bool) {
	if len(b) == 0 {
		return nil, false
	}
	if len(b) <= limit {
		return slices.Clone(b), false
	}
	n := limit
	if utf8.Valid(b) {
		for n > 0 && !utf8.RuneStart(b[n]) {
			n--
		}
	}
	return slices.Clone(b[:n]), true
}

// headers keeps the headers, in key order, whose keys and values fit in
// limit bytes together.
func headers(h map[string]string, limit int) (map[string]string, bool) {
	if len(h) == 0 {
		return nil, false
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out, used, cut := map[string]string{}, 0, false
	for _, k := range keys {
		if n := len(k) + len(h[k]); used+n <= limit {
			out[k], used = h[k], used+n
		} else {
			cut = true
		}
	}
	if len(out) == 0 {
		out = nil
	}
	return out, cut
}

// Diff returns the JSON patch from before to after (an empty before reads
// as {} when after is an object, else as null), keeping the first
// operations that fit in limit bytes, and whether it dropped any. It
// returns nil when the states are equal or either is not JSON.
func Diff(before, after []byte, limit int) ([]byte, bool) {
	if len(after) == 0 || bytes.Equal(before, after) {
		return nil, false
	}
	if len(before) == 0 {
		before = []byte("null")
		if after[0] == '{' {
			before = []byte("{}")
		}
	}
	patch, err := jsondiff.CompareJSON(before, after)
	if err != nil || len(patch) == 0 {
		return nil, false
	}
	out := []byte{'['}
	for i, op := range patch {
		b, err := marshalOp(op)
		if err != nil {
			return nil, false
		}
		if len(out)+len(b)+2 > limit {
			if i == 0 {
				return nil, true
			}
			return append(out, ']'), true
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	return append(out, ']'), false
}

// marshalOp writes op with its members in the RFC's order, and "value"
// (even null) exactly for the operations that take one.
func marshalOp(op jsondiff.Operation) ([]byte, error) {
	switch op.Type {
	case jsondiff.OperationAdd, jsondiff.OperationReplace, jsondiff.OperationTest:
		return json.Marshal(struct {
			Op    string `json:"op"`
			Path  string `json:"path"`
			Value any    `json:"value"`
		}{op.Type, op.Path, op.Value})
	}
	return json.Marshal(struct {
		Op   string `json:"op"`
		From string `json:"from,omitempty"`
		Path string `json:"path"`
	}{op.Type, op.From, op.Path})
}

// FillDiffs sets the Diff of each entry of js (one saga's journal, or its
// latest entries, in order) that records a State and no Diff: the patch
// from the State of the entry before it to its own, bounded by limit
// bytes. The entry before it is of the same version (one commit applied
// both) or of the version before. The first entry of a saga (Version 1,
// with no entry of its version before it in js) diffs from nothing. An
// entry gets no diff when the state before it is unknown: the entry before
// it is not in js, recorded no State or a truncated one, or is older than
// the version before (the state changed without a journal entry in
// between); nor when its own State is truncated.
func FillDiffs(js []store.JournalEntry, limit int) {
	for i := range js {
		j := &js[i]
		if j.Diff != nil || j.State == nil || j.StateTruncated {
			continue
		}
		var before []byte
		switch prev := i > 0 && (js[i-1].Version == j.Version || js[i-1].Version == j.Version-1); {
		case prev && js[i-1].State != nil && !js[i-1].StateTruncated:
			before = js[i-1].State
		case prev:
			continue // the state before it was not recorded whole
		case j.Version != 1:
			continue // the entry before it is not in js, or is older
		}
		j.Diff, j.DiffTruncated = Diff(before, j.State, limit)
	}
}

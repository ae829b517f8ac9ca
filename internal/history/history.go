// Package history turns the states that journal entries record (package
// journal, at each step) into RFC 6902 JSON patches, for the readers of a
// saga's history: the console, the admin API and the CLI. The diff is
// computed only for a history somebody reads. The engine does not import
// this package, and so does not link the diff library (jsondiff and the
// tidwall packages it uses).
package history

import (
	"bytes"
	"encoding/json"

	"github.com/wI2L/jsondiff"

	"github.com/idemhq/idem/store"
)

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

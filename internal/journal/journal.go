// Package journal builds the detail of a journal entry (store.JournalDetail)
// from one applied step: the message's payload and headers, its causation
// and correlation IDs, the messages the step emitted, the state after the
// step and the step's duration, bounded by a byte limit. The engine calls
// it at each step; it only copies bytes. A reader of the history turns the
// states into JSON patches with package history, which the engine does not
// import, so a program that runs the engine does not link a diff library.
package journal

import (
	"slices"
	"time"
	"unicode/utf8"

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

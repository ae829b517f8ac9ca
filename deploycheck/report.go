package deploycheck

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/store/readmodel"
)

// Kind names what a Hazard is about.
type Kind string

// The kinds of hazard.
const (
	// SagaTypeRemoved: live sagas of a type the new build has no machine
	// for.
	SagaTypeRemoved Kind = "saga-type-removed"
	// StateRemoved: live sagas in a state the new machine does not
	// declare.
	StateRemoved Kind = "state-removed"
	// EventRefused: live sagas in a state that no longer accepts an event
	// they may still receive (a pending timer fires it, or a message of
	// its type is queued or in the outbox).
	EventRefused Kind = "event-refused"
	// TimerOrphaned: pending timers that fire a message type the new
	// machine of their saga does not consume.
	TimerOrphaned Kind = "timer-orphaned"
	// SchemaNoUpgrade: live sagas stored at a schema version the new
	// machine has no upgrade path from.
	SchemaNoUpgrade Kind = "schema-no-upgrade"
	// SchemaTooNew: live sagas stored at a schema version newer than the
	// new machine's (a rollback).
	SchemaTooNew Kind = "schema-too-new"
	// AttributeRemoved: stored attribute values of a name the new machine
	// no longer declares, which the console's filters still find.
	AttributeRemoved Kind = "attribute-removed"
	// MessageUnconsumed: queued messages (or outbox messages that a
	// previous definition consumed) of a type nothing in the new build
	// consumes.
	MessageUnconsumed Kind = "message-unconsumed"
	// MixedFleet: live replicas of another definition of a saga type. A
	// hazard when they cannot serve what the new build writes (a state
	// they do not know, a newer schema version); a notice otherwise.
	MixedFleet Kind = "mixed-fleet"
	// StateUndecodable: sampled live state documents (Options.Sample)
	// that the new machine's upgrade functions and state type do not
	// decode; the detail names the first few keys. A notice of this kind
	// names a saga type that could not be sampled.
	StateUndecodable Kind = "state-undecodable"
)

// Hazard is one thing the new build cannot serve, with the count behind
// it and what to change.
type Hazard struct {
	Kind     Kind   `json:"kind"`
	SagaType string `json:"saga_type,omitempty"`
	State    string `json:"state,omitempty"`
	// Event is the message type concerned, or the attribute's or the
	// timer's name (Detail says which).
	Event string `json:"event,omitempty"`
	// Count is how many live sagas, timers, messages, attribute values,
	// replicas or sampled state documents stand behind it (Detail says
	// which).
	Count int64 `json:"count"`
	// Detail says what the store holds; Fix what to do about it.
	Detail string `json:"detail"`
	Fix    string `json:"fix"`
}

// Report is the result of a check: the hazards, which block a deploy,
// and the notices, which do not.
type Report struct {
	Hazards []Hazard `json:"hazards"`
	Notices []Hazard `json:"notices"`
	// Live counts the live sagas the check read, by saga type.
	Live map[string]int64 `json:"live"`
	// Census is what the store held.
	Census *readmodel.Census `json:"census,omitempty"`
	// Samples are what decoding a sample of the live state documents
	// found, by saga type (Options.Sample); nil when none was taken.
	Samples []Sample `json:"samples,omitempty"`
	// Took is how long Check read the store and compared.
	Took time.Duration `json:"took_ns"`
}

// OK reports whether the report has no hazard.
func (r *Report) OK() bool { return len(r.Hazards) == 0 }

// Error is the report's hazards as one error, or nil when it has none:
// what a start-up check refuses with.
func (r *Report) Error() error {
	if r.OK() {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the deploy check found %d hazard(s):", len(r.Hazards))
	for _, h := range r.Hazards {
		fmt.Fprintf(&b, "\n  - %s: %s; %s", h.Kind, h.Detail, h.Fix)
	}
	return fmt.Errorf("%s", b.String())
}

// WriteText writes the report as a table, hazards first, then notices,
// then a line per sampled saga type (Options.Sample), then a one-line
// verdict.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(r.Hazards)+len(r.Notices) > 0 {
		fmt.Fprintln(tw, "SEVERITY\tKIND\tSAGA TYPE\tSTATE\tEVENT\tCOUNT\tDETAIL\tFIX")
	}
	row := func(sev string, h Hazard) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", sev, h.Kind, cell(h.SagaType), cell(h.State), cell(h.Event), h.Count, cell(h.Detail), cell(h.Fix))
	}
	for _, h := range r.Hazards {
		row("hazard", h)
	}
	for _, h := range r.Notices {
		row("notice", h)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Samples {
		if s.NotSampled != "" {
			continue
		}
		skipped := ""
		if s.Skipped > 0 {
			skipped = fmt.Sprintf(", %d not decoded (their schema version is reported above)", s.Skipped)
		}
		fmt.Fprintf(w, "sampled %d live state document(s) of %s: %d did not decode%s\n", s.Read, cell(s.SagaType), s.Failed, skipped)
	}
	var live int64
	for _, n := range r.Live {
		live += n
	}
	verdict := "safe to deploy"
	if !r.OK() {
		verdict = "NOT safe to deploy"
	}
	_, err := fmt.Fprintf(w, "%s: %d hazard(s), %d notice(s); %d live saga(s) of %d type(s) checked in %s\n",
		verdict, len(r.Hazards), len(r.Notices), live, len(r.Live), r.Took.Round(time.Millisecond))
	return err
}

// cell is s for one table cell: quoted when it holds a tab, a line break
// or anything else not printable (a hostile name), "-" when empty.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

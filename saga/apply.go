package saga

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Outcome says what Apply did with a message.
type Outcome int

const (
	// Applied: a behaviour ran; Result holds the new state.
	Applied Outcome = iota + 1
	// Ignored: the state ignores the event (or the state is final and does
	// not handle it, or the machine ignores unhandled events).
	Ignored
	// NotFound: no saga exists and the event cannot start one.
	NotFound
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Ignored:
		return "ignored"
	case NotFound:
		return "not_found"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Input is one message to apply to one saga.
type Input struct {
	// Exists is false when no saga instance exists for the key.
	Exists bool
	// State, Data and SchemaVersion describe the stored instance.
	State         State
	Data          []byte
	SchemaVersion int
	// Msg is the decoded message (from Decode) and MsgType its type name.
	Msg     any
	MsgType string
	// Key is the canonical saga key; MessageID the dedup ID of the message.
	Key, MessageID string
	// Now is the engine's clock reading.
	Now time.Time
	// Tx is the handle Context.Tx returns (nil when the store lets handlers
	// run no statements) and Ctx the context Context.Context returns.
	Tx  any
	Ctx context.Context
	// CausationID is the causation ID of the message's envelope: for a
	// request's response, the ID of the request it answers.
	CausationID string
	// Timers are the saga's pending timers, by name, with their envelope
	// IDs (store.Instance.Timers): a request is pending while its timeout
	// timer is.
	Timers map[string]string
	// Finished reports that the stored instance is finished
	// (store.Instance.FinishedAt): it ignores every event, even in a
	// final state the machine no longer declares.
	Finished bool
}

// Result is what Apply computed. Nothing has been persisted.
type Result struct {
	Outcome Outcome
	// From and To are the states before and after.
	From, To State
	// MigratedFrom is the stored state a declared migration moved the
	// saga out of before the event applied (MigrateState); From is then
	// the state it moved to. Empty when none did.
	MigratedFrom State
	// MigrationOnly reports an Applied result whose event applied
	// nothing (its new state ignores it): only the migration is written,
	// and what the event's handlers did (their statements) is undone.
	MigrationOnly bool
	// Finished reports that To is a final state.
	Finished bool
	// Stale reports an Ignored response, timeout or fault of a request
	// that is not the saga's pending one.
	Stale bool
	// Data is the new state document at SchemaVersion.
	Data          []byte
	SchemaVersion int
	Emitted       []Emission
	Scheduled     []Scheduled
	Unscheduled   []string
	Logs          []LogRecord
	// Attributes are the values of the machine's attributes computed from
	// the new state, in NFC form; nil when none has a value.
	Attributes map[string]string
}

// Apply runs the event carried by in against the saga it describes. It is
// pure: no I/O, no goroutines, no clock other than in.Now. A handler error
// is returned as is (wrapped), with no partial result; a panic in a handler
// or an upgrade function is returned as an error wrapping ErrPanic. An
// event the state neither handles nor ignores wraps ErrUnhandled under
// UnhandledError.
func (m *Machine[S]) Apply(in Input) (res Result, err error) {
	// Upgrade functions and handlers are user code: a panic in either fails
	// the message instead of the caller.
	defer func() {
		if p := recover(); p != nil {
			res, err = Result{}, fmt.Errorf("saga %s: %w: %v", m.name, ErrPanic, p)
		}
	}()
	in.MsgType = m.eventType(in.MsgType)
	if _, ok := m.events[in.MsgType]; !ok {
		return Result{}, fmt.Errorf("saga %s: %w %q", m.name, ErrUnknownType, in.MsgType)
	}
	from := Initial
	var data S
	var migrated State
	if in.Exists {
		from = in.State
		if to, ok := m.stateMoves[from]; ok {
			migrated, from = from, to
		}
		if !m.declares(from) {
			if in.Finished && migrated == "" { // a final state this definition removed: final all the same
				return Result{Outcome: Ignored, From: from, To: from}, nil
			}
			return Result{}, fmt.Errorf("saga %s/%s: %w: %q", m.name, in.Key, ErrUnknownState, from)
		}
		if err := m.decodeState(in, &data); err != nil {
			return Result{}, err
		}
	}
	stale, cancel := m.requestCheck(in)
	if stale {
		return m.ignored(from, migrated, &data, true)
	}
	h := m.behaviors[from][in.MsgType]
	switch {
	case h == nil && !in.Exists:
		return Result{Outcome: NotFound, From: from, To: from}, nil
	case h == nil && (m.IsFinal(from) || m.unhandled == UnhandledIgnore):
		return m.ignored(from, migrated, &data, false)
	case h == nil:
		return Result{}, fmt.Errorf("saga %s: %w: %s in %s", m.name, ErrUnhandled, in.MsgType, from)
	case h.ignore:
		return m.ignored(from, migrated, &data, false)
	}

	c := &Context[S]{Data: &data, key: in.Key, messageID: in.MessageID, now: in.Now, current: from, next: from, timers: in.Timers, tx: in.Tx, ctx: in.Ctx}
	if cancel != "" {
		c.Unschedule(cancel) // the request is answered
	}
	if err := h.run(c, in.Msg); errors.Is(err, errIgnore) {
		if migrated == "" {
			return m.ignored(from, migrated, &data, false)
		}
		var stored S // the handler may have changed data before it ignored the event
		if err := m.decodeState(in, &stored); err != nil {
			return Result{}, err
		}
		return m.ignored(from, migrated, &stored, false)
	} else if err != nil {
		return Result{}, fmt.Errorf("saga %s: %s in %s: %w", m.name, in.MsgType, from, err)
	}
	out, err := json.Marshal(&data)
	if err != nil {
		return Result{}, fmt.Errorf("saga %s: encode state: %w", m.name, err)
	}
	attrs, err := m.attributeValues(&data)
	if err != nil {
		return Result{}, err
	}
	return Result{
		Outcome:       Applied,
		MigratedFrom:  migrated,
		From:          from,
		To:            c.next,
		Finished:      m.final[c.next],
		Data:          out,
		SchemaVersion: m.version,
		Emitted:       c.emitted,
		Scheduled:     c.scheduled,
		Unscheduled:   c.unscheduled,
		Logs:          c.logs,
		Attributes:    attrs,
	}, nil
}

// ignored is the result of an event the saga's state ignores: nothing
// changes, unless a declared migration moved the saga out of the state it
// was stored in (migrated), which the result then persists as an applied
// step that changes nothing else, so that the migration happens once.
func (m *Machine[S]) ignored(from, migrated State, data *S, stale bool) (Result, error) {
	if migrated == "" {
		return Result{Outcome: Ignored, From: from, To: from, Stale: stale}, nil
	}
	out, err := json.Marshal(data)
	if err != nil {
		return Result{}, fmt.Errorf("saga %s: encode state: %w", m.name, err)
	}
	attrs, err := m.attributeValues(data)
	if err != nil {
		return Result{}, err
	}
	return Result{Outcome: Applied, MigratedFrom: migrated, MigrationOnly: true, Stale: stale, From: from, To: from, Finished: m.final[from],
		Data: out, SchemaVersion: m.version, Attributes: attrs}, nil
}

func (m *Machine[S]) decodeState(in Input, data *S) error {
	raw := json.RawMessage(bytes.Clone(in.Data)) // upgrade functions may edit their input
	v := in.SchemaVersion
	if v == 0 {
		v = 1
	}
	if v > m.version {
		return fmt.Errorf("saga %s/%s: %w: %w: stored version %d is newer than the machine's %d", m.name, in.Key, ErrUnknownState, ErrSchema, v, m.version)
	}
	for ; v < m.version; v++ {
		up := m.upgrades[v]
		if up == nil {
			return fmt.Errorf("saga %s/%s: %w: no upgrade from version %d", m.name, in.Key, ErrSchema, v)
		}
		var err error
		if raw, err = up(raw); err != nil {
			return fmt.Errorf("saga %s/%s: %w: upgrade from version %d: %w", m.name, in.Key, ErrSchema, v, err)
		}
	}
	if err := json.Unmarshal(raw, data); err != nil {
		return fmt.Errorf("saga %s/%s: %w: decode: %w", m.name, in.Key, ErrSchema, err)
	}
	return nil
}

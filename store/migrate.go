package store

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// StateMigrator is implemented by stores that move sagas from one state to
// another in batches (pgstore and sqlitestore do): the eager pass of a
// declared state migration (idem deploy migrate). The methods are safe for
// concurrent use, run outside any unit of work, and must pass storetest.
type StateMigrator interface {
	// MigrateStates moves up to p.Limit sagas of type p.SagaType stored in
	// state p.From, live or finished, to state p.To, in one transaction:
	// each gets version+1 and UpdatedAt p.At, and a journal entry
	// (MigrationEntry). It returns how many it moved, and a call cut short
	// (a crash) moved all of its batch or none. The version
	// bump makes a unit of work that loaded a moved saga before fail its
	// commit with ErrConflict. It changes nothing else: data, schema
	// version, timers and FinishedAt stay as they are, so moving live
	// sagas into a final state leaves them unfinished (idem deploy migrate
	// leaves such a migration to the lazy path, which finishes them). A
	// call may move fewer than p.Limit while more remain, even 0
	// (PostgreSQL skips the sagas a unit of work in flight holds, rather
	// than wait for it and risk a deadlock), so a caller that must empty
	// p.From checks CountState after a call that moved 0. A call that
	// fails with an error wrapping ErrConflict (a busy store) moved nothing
	// and may be made again. Params that fail Validate are
	// refused with an error wrapping ErrRejected, and nothing moves.
	MigrateStates(ctx context.Context, p *MigrateStatesParams) (int, error)
	// CountState counts the sagas of sagaType stored in state, live or
	// finished: what MigrateStates would move from it. A type or state
	// the store could not have stored counts 0.
	CountState(ctx context.Context, sagaType, state string) (int64, error)
}

// MigrateStatesParams selects the sagas MigrateStates moves and says how
// it journals them.
type MigrateStatesParams struct {
	// SagaType is the saga type whose sagas move.
	SagaType string
	// From is the state they are stored in; To the state they move to.
	// They must differ.
	From, To string
	// Limit bounds how many sagas one call moves; it must be positive.
	Limit int
	// At is the sagas' new UpdatedAt and the journal entries' time.
	At time.Time
	// EventType is the journal entries' event type (saga.MigrationEvent,
	// which this package does not import); it must not be empty.
	EventType string
	// Actor is who asked for the migration, kept in each entry's
	// JournalDetail.Actor; "" for the engine.
	Actor string
	// StateLimit bounds, in bytes, the stored document each entry keeps
	// (JournalDetail.State, cut at a rune boundary and marked
	// StateTruncated beyond it), as the engine's JournalPayloadLimit: zero
	// means 4096, negative keeps none.
	StateLimit int
}

// MigrationMessageID is the MessageID of the journal entry MigrateStates
// writes for a migration from one state to another: the same for every
// saga and every call, so that the entry is deterministic.
func MigrationMessageID(from, to string) string { return "idem.migrate/" + from + ">" + to }

// Validate reports the first param a store must refuse, with an error
// wrapping ErrRejected: a non-positive Limit, an empty SagaType, From, To
// or EventType, From equal to To, a zero At, or a string that is not valid UTF-8 or
// holds U+0000 (no SQL store keeps one as a saga type or state).
func (p *MigrateStatesParams) Validate() error {
	switch {
	case p.Limit <= 0:
		return fmt.Errorf("migrate states: Limit is %d, want a positive batch size: %w", p.Limit, ErrRejected)
	case p.SagaType == "" || p.From == "" || p.To == "" || p.EventType == "":
		return fmt.Errorf("migrate states: SagaType, From, To and EventType must not be empty: %w", ErrRejected)
	case p.From == p.To:
		return fmt.Errorf("migrate states: From and To are both %q: %w", p.From, ErrRejected)
	case p.At.IsZero():
		return fmt.Errorf("migrate states: At is zero: give the time of the migration: %w", ErrRejected)
	}
	for _, f := range [...]struct{ name, v string }{{"SagaType", p.SagaType}, {"From", p.From}, {"To", p.To}, {"EventType", p.EventType}, {"Actor", p.Actor}} {
		if !StorableText(f.v) {
			return fmt.Errorf("migrate states: %s %q is not valid UTF-8 or holds U+0000: %w", f.name, f.v, ErrRejected)
		}
	}
	return nil
}

// StorableText reports whether s is valid UTF-8 without U+0000: text every
// SQL store keeps as it is.
func StorableText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// MigrationEntry is the journal entry of one saga that MigrateStates moved:
// event p.EventType from p.From to p.To at p.At, message
// MigrationMessageID, version the saga's new version, and the stored
// document data as JournalDetail.State (bounded by p.StateLimit).
func (p *MigrateStatesParams) MigrationEntry(key string, version int64, data []byte) JournalEntry {
	e := JournalEntry{
		SagaType: p.SagaType, Key: key, MessageID: MigrationMessageID(p.From, p.To), EventType: p.EventType,
		FromState: p.From, ToState: p.To, Version: version, At: p.At,
	}
	e.Actor = p.Actor
	limit := p.StateLimit
	if limit == 0 {
		limit = 4096
	}
	if limit > 0 && len(data) > 0 {
		n := min(limit, len(data))
		if n < len(data) && utf8.Valid(data) {
			for n > 0 && !utf8.RuneStart(data[n]) {
				n--
			}
		}
		e.State, e.StateTruncated = append([]byte(nil), data[:n]...), n < len(data)
	}
	return e
}

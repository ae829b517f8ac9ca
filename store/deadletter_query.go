package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrReplayPending is returned by DeadLetterReplayer.BeginReplay when the
// dead letter's latest replay is still pending.
var ErrReplayPending = errors.New("store: the dead letter's latest replay is still pending")

// DeadLetterQuerier is implemented by stores that filter and count dead
// letters in the database instead of handing every row to the caller
// (every bundled store). It is optional: operations tools type-assert a
// Store for it and fall back to paging ListDeadLetters, which reads at most
// a bounded number of rows and cannot bind a bulk action to what was
// counted.
type DeadLetterQuerier interface {
	// QueryDeadLetters returns one page of the dead letters q selects, in
	// ID order (byte order). An empty page means there are no more.
	QueryDeadLetters(ctx context.Context, q *DeadLetterQuery) ([]DeadLetter, error)
	// CountDeadLetters counts the dead letters q selects by reason (q's
	// After and Limit are ignored), and returns with the counts the mark
	// that selects, as DeadLetterQuery.AsOf, exactly the dead letters
	// counted: the count and the mark are read at one moment.
	CountDeadLetters(ctx context.Context, q *DeadLetterQuery) (*DeadLetterCount, error)
	// DeleteDeadLettersAsOf removes the dead letters among ids that the
	// mark asOf selects (as CountDeadLetters returned it; "" selects every
	// one): one recorded again, archived or restored after the mark is
	// kept (so a purge of archived dead letters never deletes one
	// restored since its count). Missing IDs are
	// ignored. It returns how many it removed, with their history.
	DeleteDeadLettersAsOf(ctx context.Context, ids []string, asOf string) (int, error)
}

// DeadLetterCount is what CountDeadLetters returns.
type DeadLetterCount struct {
	// ByReason counts the dead letters by reason.
	ByReason map[string]int
	// AsOf is the mark of the moment of the count: an opaque,
	// printable-ASCII string to pass as DeadLetterQuery.AsOf.
	AsOf string
}

// DeadLetterQuery selects dead letters for DeadLetterQuerier. Every
// non-empty filter must match; the zero value selects every dead letter
// that is not archived, first page of the default size. Only a store that
// implements DeadLetterTypeQuerier selects by MessageType; callers match
// the type themselves otherwise.
type DeadLetterQuery struct {
	// SagaType and Key are the saga the dead letter was recorded for.
	SagaType string
	Key      string
	// Reason is the machine-readable reason ("malformed_body", ...).
	Reason string
	// MessageType is the envelope's type; see DeadLetterTypeQuerier.
	MessageType string
	// AsOf, when set, is a mark CountDeadLetters returned: only the dead
	// letters last recorded before it are selected, so that an action
	// confirmed on a count acts on what was counted and on nothing that
	// arrived, or failed again, since. Unless Archived is
	// ArchivedInclude (without ArchivedBefore), only those last archived
	// or restored before it are selected too (see ArchivalBound). A mark
	// the store did not make is an error.
	AsOf string
	// State selects by what became of the dead letter's replays; "" (or
	// DeadLettersAll) selects every one.
	State DeadLetterState
	// Fingerprint selects the dead letters of one fingerprint (see
	// Fingerprint), or with FingerprintNone those recorded before
	// fingerprints.
	Fingerprint string
	// Archived selects by archival: ArchivedExclude (the zero value)
	// leaves archived dead letters out (see DeadLetterArchiver).
	Archived ArchivedFilter
	// ArchivedBefore, when set, selects only the dead letters archived
	// before it, whatever Archived says.
	ArchivedBefore time.Time
	// After is the ID of the last dead letter of the previous page.
	After string
	// Limit bounds the page; 0 means the store's default.
	Limit int
}

// DeadLetterState is what became of a dead letter's replays, by its latest
// replay.
type DeadLetterState string

// The states of a dead letter, as DeadLetterQuery.State selects them.
const (
	// DeadLettersAll selects every dead letter.
	DeadLettersAll DeadLetterState = "all"
	// DeadLettersUnresolved: never replayed, or the latest replay failed
	// or was not sent. Its message still waits for an operator.
	DeadLettersUnresolved DeadLetterState = "unresolved"
	// DeadLettersResolved: the latest replay succeeded, or found its
	// message applied already (ReplayDuplicate). Replaying it again would
	// run its message again.
	DeadLettersResolved DeadLetterState = "resolved"
	// DeadLettersPending: the latest replay is pending.
	DeadLettersPending DeadLetterState = "pending"
)

// ParseDeadLetterState reads a state as DeadLetterQuery.State takes it:
// all, unresolved, resolved or pending ("" is all).
func ParseDeadLetterState(s string) (DeadLetterState, error) {
	switch st := DeadLetterState(s); st {
	case "", DeadLettersAll, DeadLettersUnresolved, DeadLettersResolved, DeadLettersPending:
		return st, nil
	}
	return "", fmt.Errorf("dead letter state %.40q: want all, unresolved, resolved or pending", s)
}

// State returns d's state by its latest replay.
func (d *DeadLetter) State() DeadLetterState {
	r := d.LastReplay()
	switch {
	case r == nil:
		return DeadLettersUnresolved
	case r.Outcome == ReplaySucceeded || r.Outcome == ReplayDuplicate:
		return DeadLettersResolved
	case r.Outcome == ReplayPending:
		return DeadLettersPending
	}
	return DeadLettersUnresolved
}

// Selects reports whether st selects a dead letter in state d ("" and
// DeadLettersAll select every one).
func (st DeadLetterState) Selects(d DeadLetterState) bool {
	return st == "" || st == DeadLettersAll || st == d
}

// ReplayOutcome is what became of one replay of a dead letter.
type ReplayOutcome string

// The outcomes of a replay.
const (
	// ReplayPending: the envelope was published again and no engine has
	// yet consumed it, or one is still retrying it.
	ReplayPending ReplayOutcome = "pending"
	// ReplaySucceeded: an engine consumed the replayed message without
	// dead-lettering it again: it was applied, or ignored as its saga
	// decides.
	ReplaySucceeded ReplayOutcome = "succeeded"
	// ReplayFailed: the message was dead-lettered again.
	ReplayFailed ReplayOutcome = "failed"
	// ReplayNotSent: publishing it again failed; Error says why.
	ReplayNotSent ReplayOutcome = "not_sent"
	// ReplayDuplicate: an engine consumed the replayed message and found it
	// already applied (its inbox record or its claimed token): not applied,
	// an earlier copy of this message was applied. The dead letter is
	// resolved, as by ReplaySucceeded.
	ReplayDuplicate ReplayOutcome = "duplicate"
)

// HeaderReplay marks an envelope published again by a replay: its value is
// the replay's time (RFC 3339). An engine that consumes such a message
// without dead-lettering it settles the replay as ReplaySucceeded (or
// ReplayDuplicate when it was found applied already); a store
// settles the pending replay as ReplayFailed only when the dead letter is
// recorded again from an envelope that carries it (a late copy of the
// original message failing again settles nothing).
const HeaderReplay = "idem-replayed-at"

// Replay is one replay of a dead letter.
type Replay struct {
	// At is when the envelope was published again.
	At      time.Time     `json:"at"`
	Outcome ReplayOutcome `json:"outcome"`
	// SettledAt is when the outcome was known: the new failure's time for
	// ReplayFailed (zero while pending).
	SettledAt time.Time `json:"settled_at,omitzero"`
	// Reason and Error are the new failure's for ReplayFailed, and the
	// publish error for ReplayNotSent.
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	// By is who replayed it, as WithReplayBy said when it began ("" when
	// unknown).
	By string `json:"by,omitempty"`
}

// DeadLetterReplayer is implemented by stores that keep a dead letter's
// replay history (every bundled store). The engine's ReplayDeadLetter then
// keeps the dead letter, records the replay before publishing, and settles
// it; without it, a replay deletes the dead letter.
type DeadLetterReplayer interface {
	// BeginReplay appends a ReplayPending replay at at to the history of
	// dead letter id, or fails with an error wrapping ErrNotFound, or
	// ErrReplayPending when its latest replay is still pending: at most one
	// replay of a dead letter is pending at a time, so that the outcome
	// recorded is that of the copy consumed. The dead letter's mark (see
	// DeadLetterQuery.AsOf) does not change. The replay's By is
	// ReplayBy(ctx).
	BeginReplay(ctx context.Context, id string, at time.Time) error
	// SettleReplays settles the latest replay of each dead letter p.IDs
	// names, if it is ReplayPending, with p's outcome; missing IDs and
	// settled replays are left alone.
	SettleReplays(ctx context.Context, p *SettleReplaysParams) error
}

// SettleReplaysParams is what SettleReplays records.
type SettleReplaysParams struct {
	IDs     []string
	Outcome ReplayOutcome
	At      time.Time
	// Error is the publish error of ReplayNotSent.
	Error string
}

// LastReplay returns d's latest replay, or nil when it was never replayed.
func (d *DeadLetter) LastReplay() *Replay {
	if len(d.Replays) == 0 {
		return nil
	}
	return &d.Replays[len(d.Replays)-1]
}

// DeadLetterTypeQuerier is a DeadLetterQuerier (and, when the store groups
// dead letters, a DeadLetterGrouper) that also selects by
// DeadLetterQuery.MessageType in the database. A store without it ignores
// MessageType, and its callers match the envelope's type themselves.
//
// A MessageType that holds U+0000 selects nothing (PostgreSQL cannot hold
// such a type as text); an envelope with a U+0000 elsewhere is selected by
// its type.
type DeadLetterTypeQuerier interface {
	DeadLetterQuerier
	// SelectsMessageType is a marker: it does nothing.
	SelectsMessageType()
}

// UnresolvedCounter is a store that counts its unresolved
// (DeadLettersUnresolved), not archived dead letters up to a bound, reading
// no other dead letter (pgstore from the index of migration 17; memstore).
// The console's overview counts with it; without it, it estimates.
type UnresolvedCounter interface {
	// CountUnresolved returns how many dead letters are unresolved and not
	// archived, counting at most bound of them (a bound below 1 counts
	// none).
	CountUnresolved(ctx context.Context, bound int) (int, error)
}

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

// DeadLetterState is what became of a dead letter's replays, by its latest
// replay.
type DeadLetterState string

// The states of a dead letter, as readmodel.DeadLetterQuery.State selects them.
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

// ParseDeadLetterState reads a state as readmodel.DeadLetterQuery.State takes it:
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
	// readmodel.DeadLetterQuery.AsOf) does not change. The replay's By is
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

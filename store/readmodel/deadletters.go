package readmodel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

// ErrBadMark is wrapped by the DeadLetterQuerier methods when a mark
// (DeadLetterQuery.AsOf, DeleteDeadLettersAsOf's asOf) is not one this
// store makes: it is bad input, refused before any query, never a store
// failure. Check with errors.Is.
var ErrBadMark = errors.New("not a mark this store made (pass the as_of a count returned)")

// DeadLetterQuerier is implemented by stores that filter and count dead
// letters in the database instead of handing every row to the caller
// (every bundled store). It is optional: operations tools type-assert a
// store.Store for it and fall back to paging ListDeadLetters, which reads at most
// a bounded number of rows and cannot bind a bulk action to what was
// counted.
type DeadLetterQuerier interface {
	// QueryDeadLetters returns one page of the dead letters q selects, in
	// ID order (byte order). An empty page means there are no more.
	QueryDeadLetters(ctx context.Context, q *DeadLetterQuery) ([]store.DeadLetter, error)
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
	// store.DeadLettersAll) selects every one.
	State store.DeadLetterState
	// Fingerprint selects the dead letters of one fingerprint (see
	// store.Fingerprint), or with store.FingerprintNone those recorded before
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

// DeadLetterTypeQuerier is a DeadLetterQuerier (and, when the store groups
// dead letters, a DeadLetterGrouper) that can say whether it selects by
// DeadLetterQuery.MessageType in the database. A store without it, or
// whose SelectsMessageType reports false, ignores MessageType, and its
// callers match the envelope's type themselves.
//
// A MessageType that holds U+0000 selects nothing (PostgreSQL cannot hold
// such a type as text); an envelope with a U+0000 elsewhere is selected by
// its type.
type DeadLetterTypeQuerier interface {
	DeadLetterQuerier
	// SelectsMessageType reports whether QueryDeadLetters,
	// CountDeadLetters and GroupDeadLetters select by
	// DeadLetterQuery.MessageType. Its answer does not change over the
	// store's life. Safe for concurrent use.
	SelectsMessageType() bool
}

// SelectsMessageType reports whether s selects dead letters by
// DeadLetterQuery.MessageType in the database: whether it is a
// DeadLetterTypeQuerier that says so.
func SelectsMessageType(s store.Store) bool {
	tq, ok := s.(DeadLetterTypeQuerier)
	return ok && tq.SelectsMessageType()
}

// UnresolvedCounter is a store that counts its unresolved
// (store.DeadLettersUnresolved), not archived dead letters up to a bound, reading
// no other dead letter (pgstore from the index of migration 17; memstore).
// The console's overview counts with it; without it, it estimates.
type UnresolvedCounter interface {
	// CountUnresolved returns how many dead letters are unresolved and not
	// archived, counting at most bound of them (a bound below 1 counts
	// none).
	CountUnresolved(ctx context.Context, bound int) (int, error)
}

// ArchivedFilter selects dead letters by whether they are archived, as
// DeadLetterQuery.Archived takes it.
type ArchivedFilter string

// The values of DeadLetterQuery.Archived.
const (
	// ArchivedExclude (the zero value) leaves archived dead letters out.
	ArchivedExclude ArchivedFilter = ""
	// ArchivedOnly selects only archived dead letters.
	ArchivedOnly ArchivedFilter = "only"
	// ArchivedInclude selects archived dead letters and the others.
	ArchivedInclude ArchivedFilter = "include"
)

// ParseArchivedFilter reads an ArchivedFilter: exclude (or ""), only or
// include.
func ParseArchivedFilter(s string) (ArchivedFilter, error) {
	switch a := ArchivedFilter(s); a {
	case ArchivedExclude, ArchivedOnly, ArchivedInclude:
		return a, nil
	case "exclude":
		return ArchivedExclude, nil
	}
	return "", fmt.Errorf("archived filter %.40q: want exclude, only or include", s)
}

// Selects reports whether a selects a dead letter that is archived or not.
func (a ArchivedFilter) Selects(archived bool) bool {
	switch a {
	case ArchivedOnly:
		return archived
	case ArchivedInclude:
		return true
	}
	return !archived
}

// ArchivalBound reports whether q's AsOf binds the archival state too:
// whether q selects by archival (Archived is not ArchivedInclude, or
// ArchivedBefore is set), so that a dead letter archived or restored
// after the mark is left out, as it was not counted as it is now.
func (q *DeadLetterQuery) ArchivalBound() bool {
	return q.AsOf != "" && (q.Archived != ArchivedInclude || !q.ArchivedBefore.IsZero())
}

// SelectsTriage reports whether q's Fingerprint, Archived and
// ArchivedBefore select d: what a store that filters in memory checks
// besides the other filters.
func (q *DeadLetterQuery) SelectsTriage(d *store.DeadLetter) bool {
	switch {
	case q.Fingerprint == store.FingerprintNone && d.Fingerprint != "":
		return false
	case q.Fingerprint != "" && q.Fingerprint != store.FingerprintNone && d.Fingerprint != q.Fingerprint:
		return false
	case !q.ArchivedBefore.IsZero():
		return d.Archived() && d.ArchivedAt.Before(q.ArchivedBefore)
	}
	return q.Archived.Selects(d.Archived())
}

// DeadLetterGroup is the dead letters that share one fingerprint and
// reason, as DeadLetterGrouper returns them.
type DeadLetterGroup struct {
	// Fingerprint is "" for the dead letters recorded before fingerprints
	// (select them with store.FingerprintNone).
	Fingerprint string
	Reason      string
	// SampleError is the error of the group's latest failure.
	SampleError string
	Count       int
	// FirstSeen is the earliest FirstFailedAt, LastSeen the latest
	// LastFailedAt, of the group's dead letters.
	FirstSeen time.Time
	LastSeen  time.Time
}

// DeadLetterGrouper is implemented by stores that group dead letters by
// fingerprint in the database (every bundled store). It is optional, and
// must pass storetest.Run.
type DeadLetterGrouper interface {
	// GroupDeadLetters returns the groups of the dead letters q selects
	// (q.After is ignored), largest first, then latest LastSeen first, at
	// most q.Limit of them (0: the store's default page size).
	GroupDeadLetters(ctx context.Context, q *DeadLetterQuery) ([]DeadLetterGroup, error)
}

// DeadLetterArchiver is implemented by stores that archive dead letters
// instead of deleting them (every bundled store). An archived dead letter
// keeps everything, leaves the default selection of DeadLetterQuery (see
// Archived) and can be restored. Recording it again (its message failed
// again) restores it. It is optional, and must pass storetest.Run.
type DeadLetterArchiver interface {
	// ArchiveDeadLetters archives the dead letters among p.IDs that are
	// not archived and that the mark p.AsOf selects ("" selects every
	// one), at p.At, and returns how many it archived. Missing IDs are
	// ignored. A bad mark wraps ErrBadMark.
	ArchiveDeadLetters(ctx context.Context, p *ArchiveParams) (int, error)
	// RestoreDeadLetters restores the archived dead letters among p.IDs
	// that the mark p.AsOf selects ("" selects every one) and returns how
	// many it restored (p.At is ignored). Missing IDs are ignored. A bad
	// mark wraps ErrBadMark.
	RestoreDeadLetters(ctx context.Context, p *ArchiveParams) (int, error)
}

// ArchiveParams is what ArchiveDeadLetters archives and
// RestoreDeadLetters restores.
type ArchiveParams struct {
	IDs []string
	// AsOf is a mark CountDeadLetters returned, or "" for none. It
	// selects the dead letters last recorded, and last archived or
	// restored, before it: one archived or restored since the count is
	// left as it is, so that an action acts on at most what was counted.
	AsOf string
	// At is the time of the archival; zero means now, by the store's
	// clock.
	At time.Time
}

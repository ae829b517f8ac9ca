package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var (
	_ readmodel.DeadLetterQuerier     = (*Store)(nil)
	_ store.DeadLetterReplayer        = (*Store)(nil)
	_ readmodel.DeadLetterTypeQuerier = (*Store)(nil)
)

// SelectsMessageType reports true: the store selects dead letters by
// readmodel.DeadLetterQuery.MessageType; see readmodel.DeadLetterTypeQuerier.
func (s *Store) SelectsMessageType() bool { return true }

// deadMarks numbers the recordings of dead letters: each recording takes
// the next number, so a count's mark (the last number handed out) selects
// exactly the dead letters recorded before it.
type deadMarks struct {
	last  uint64
	bySeq map[string]uint64 // dead letter ID → number of its last recording
	// archSeq maps a dead letter ID to the number its last archival or
	// restoration took (absent: never archived), so that a mark binds
	// the archival state too.
	archSeq map[string]uint64
}

// archived records that the dead letter id was archived or restored now.
// The caller holds s.mu for writing.
func (s *Store) archived(id string) {
	if s.deadMarks.archSeq == nil {
		s.deadMarks.archSeq = make(map[string]uint64)
	}
	s.deadMarks.last++
	s.deadMarks.archSeq[id] = s.deadMarks.last
}

// unchangedSince reports whether the dead letter id was last recorded,
// and last archived or restored, no later than mark. The caller holds
// s.mu.
func (s *Store) unchangedSince(id string, mark uint64) bool {
	return s.deadMarks.bySeq[id] <= mark && s.deadMarks.archSeq[id] <= mark
}

// recordDeadLetter stores d, keeping a stored one's first failure and
// history and, when d comes from a replayed copy (store.HeaderReplay),
// settling its pending replay as failed. The caller holds s.mu
// for writing.
func (s *Store) recordDeadLetter(d *store.DeadLetter) {
	c := cloneDeadLetter(d)
	c.FirstReason, c.FirstError, c.Replays = d.Reason, d.Error, nil
	c.Fingerprint, c.ArchivedAt = store.Fingerprint(d.Reason, d.Error), time.Time{} // recorded again: restored
	if old := s.dead[d.ID]; old != nil {
		c.FirstFailedAt = minTime(old.FirstFailedAt, d.FirstFailedAt)
		c.FirstReason, c.FirstError, c.Replays = old.FirstReason, old.FirstError, old.Replays
		if r := c.LastReplay(); r != nil && r.Outcome == store.ReplayPending && d.Envelope.Headers[store.HeaderReplay] != "" {
			c.Replays = slices.Clone(c.Replays) // copies handed out share the old array
			r = c.LastReplay()
			r.Outcome, r.SettledAt, r.Reason, r.Error = store.ReplayFailed, d.LastFailedAt, d.Reason, d.Error
		}
	}
	s.dead[d.ID] = c
	if s.deadMarks.bySeq == nil {
		s.deadMarks.bySeq = make(map[string]uint64)
	}
	s.deadMarks.last++
	s.deadMarks.bySeq[d.ID] = s.deadMarks.last
}

// deleteDeadLetter removes one dead letter. The caller holds s.mu for
// writing.
func (s *Store) deleteDeadLetter(id string) {
	delete(s.dead, id)
	delete(s.deadMarks.bySeq, id)
	delete(s.deadMarks.archSeq, id)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// parseMark reads a mark CountDeadLetters made; "" is no bound.
func parseMark(asOf string) (uint64, error) {
	if asOf == "" {
		return ^uint64(0), nil
	}
	n, err := strconv.ParseUint(asOf, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("memstore: dead letters as of %.40q: %w", asOf, readmodel.ErrBadMark)
	}
	return n, nil
}

// selects reports whether q (but After) selects the dead letter d bounded
// by mark: recorded before it and, unless q selects archived dead letters
// and the others alike, archived or restored before it. The caller holds
// s.mu.
func (s *Store) selects(q *readmodel.DeadLetterQuery, d *store.DeadLetter, mark uint64) bool {
	return (q.SagaType == "" || d.SagaType == q.SagaType) && (q.Key == "" || d.Key == q.Key) &&
		(q.Reason == "" || d.Reason == q.Reason) && selectsType(q.MessageType, d) && s.deadMarks.bySeq[d.ID] <= mark && q.State.Selects(d.State()) &&
		(!q.ArchivalBound() || s.deadMarks.archSeq[d.ID] <= mark) && q.SelectsTriage(d)
}

// QueryDeadLetters returns one page of the dead letters q selects, in ID
// order.
func (s *Store) QueryDeadLetters(ctx context.Context, q *readmodel.DeadLetterQuery) ([]store.DeadLetter, error) {
	q = cmp.Or(q, &readmodel.DeadLetterQuery{})
	mark, err := parseMark(q.AsOf)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "query dead letters"); err != nil {
		return nil, err
	}
	var list []*store.DeadLetter
	for id, d := range s.dead {
		if (q.After == "" || id > q.After) && s.selects(q, d, mark) {
			list = append(list, d)
		}
	}
	slices.SortFunc(list, func(a, b *store.DeadLetter) int { return cmp.Compare(a.ID, b.ID) })
	list = list[:min(len(list), limit(q.Limit))]
	out := make([]store.DeadLetter, len(list))
	for i, d := range list {
		out[i] = *cloneDeadLetter(d)
	}
	return out, nil
}

// CountDeadLetters counts the dead letters q selects by reason, with the
// mark of the count.
func (s *Store) CountDeadLetters(ctx context.Context, q *readmodel.DeadLetterQuery) (*readmodel.DeadLetterCount, error) {
	q = cmp.Or(q, &readmodel.DeadLetterQuery{})
	mark, err := parseMark(q.AsOf)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "count dead letters"); err != nil {
		return nil, err
	}
	c := &readmodel.DeadLetterCount{ByReason: map[string]int{}, AsOf: strconv.FormatUint(min(mark, s.deadMarks.last), 10)}
	for _, d := range s.dead {
		if s.selects(q, d, mark) {
			c.ByReason[d.Reason]++
		}
	}
	return c, nil
}

// DeleteDeadLettersAsOf removes the dead letters among ids recorded, and
// archived or restored, before the mark asOf.
func (s *Store) DeleteDeadLettersAsOf(ctx context.Context, ids []string, asOf string) (int, error) {
	mark, err := parseMark(asOf)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "delete dead letters"); err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		if s.dead[id] != nil && s.unchangedSince(id, mark) {
			s.deleteDeadLetter(id)
			n++
		}
	}
	return n, nil
}

// BeginReplay appends a pending replay to the dead letter id's history.
func (s *Store) BeginReplay(ctx context.Context, id string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "begin replay of dead letter "+id); err != nil {
		return err
	}
	d := s.dead[id]
	if d == nil {
		return fmt.Errorf("memstore: begin replay of dead letter %s: %w", id, store.ErrNotFound)
	}
	if d.State() == store.DeadLettersPending {
		return fmt.Errorf("memstore: begin replay of dead letter %s: %w", id, store.ErrReplayPending)
	}
	d.Replays = append(slices.Clip(d.Replays), store.Replay{At: at, Outcome: store.ReplayPending, By: store.ReplayBy(ctx)})
	return nil
}

// SettleReplays settles the pending latest replay of each dead letter
// p.IDs names.
func (s *Store) SettleReplays(ctx context.Context, p *store.SettleReplaysParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "settle replays"); err != nil {
		return err
	}
	s.settleReplays(p)
	return nil
}

// settleReplays settles the pending latest replays p names. The caller
// holds s.mu for writing.
func (s *Store) settleReplays(p *store.SettleReplaysParams) {
	for _, id := range p.IDs {
		d := s.dead[id]
		if d == nil {
			continue
		}
		if r := d.LastReplay(); r != nil && r.Outcome == store.ReplayPending {
			d.Replays = slices.Clone(d.Replays) // copies handed out share the old array
			r = d.LastReplay()
			r.Outcome, r.SettledAt, r.Error = p.Outcome, p.At, p.Error
		}
	}
}

// selectsType reports whether the message-type filter typ selects d; one
// that holds U+0000 selects nothing (see readmodel.DeadLetterTypeQuerier).
func selectsType(typ string, d *store.DeadLetter) bool {
	return typ == "" || (d.Envelope.Type == typ && !strings.Contains(typ, "\x00"))
}

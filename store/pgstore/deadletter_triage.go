package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var (
	_ readmodel.DeadLetterGrouper  = (*Store)(nil)
	_ readmodel.DeadLetterArchiver = (*Store)(nil)
)

// triageFilter appends to args (whose first element is the query mode,
// not a parameter) the values of q's MessageType, Fingerprint and
// ArchivedBefore, and of its mark when it binds the archival state (see
// readmodel.DeadLetterQuery.ArchivalBound), and returns the conditions that
// use them with q's Archived. The caller has checked the mark.
func triageFilter(q *readmodel.DeadLetterQuery, args []any) (string, []any) {
	cond := ""
	if q.MessageType != "" {
		args = append(args, q.MessageType)
		cond += fmt.Sprintf(` AND message_type COLLATE "C" = $%d`, len(args)-1)
	}
	if q.ArchivalBound() {
		args = append(args, q.AsOf)
		cond += fmt.Sprintf(` AND %s`, archivalAsOf(len(args)-1))
	}
	switch q.Fingerprint {
	case "":
	case store.FingerprintNone:
		cond += ` AND fingerprint = ''`
	default:
		args = append(args, q.Fingerprint)
		cond += fmt.Sprintf(` AND fingerprint COLLATE "C" = $%d`, len(args)-1)
	}
	switch {
	case !q.ArchivedBefore.IsZero():
		args = append(args, q.ArchivedBefore)
		cond += fmt.Sprintf(` AND archived_at < $%d`, len(args)-1)
	case q.Archived == readmodel.ArchivedOnly:
		cond += ` AND archived_at IS NOT NULL`
	case q.Archived == readmodel.ArchivedInclude:
	default:
		cond += ` AND archived_at IS NULL`
	}
	return cond, args
}

// archivalAsOf is the condition that the dead letter was last archived or
// restored before the mark, parameter $n.
func archivalAsOf(n int) string {
	return fmt.Sprintf(`(archived_xid IS NULL OR pg_visible_in_snapshot(archived_xid, $%d::pg_snapshot))`, n)
}

// groupDeadLettersSQL groups the dead letters the conditions at %[1]s
// select (deadLetterFilters and more): per fingerprint and reason, the
// count, first and last seen (an aggregate the index
// idem_dead_letters_open_groups answers alone for the unresolved ones),
// then the error of each group's latest failure (one row of that index
// per group). $5 is the limit.
const groupDeadLettersSQL = `SELECT g.fingerprint, g.reason, g.n, g.first_seen, g.last_seen, e.error FROM (
  SELECT fingerprint COLLATE "C" AS fingerprint, reason COLLATE "C" AS reason, count(*) AS n,
    min(first_failed_at) AS first_seen, max(last_failed_at) AS last_seen
  FROM idem_dead_letters WHERE %[1]s
  GROUP BY fingerprint COLLATE "C", reason COLLATE "C"
  ORDER BY n DESC, last_seen DESC, fingerprint, reason LIMIT $5) g
CROSS JOIN LATERAL (SELECT error FROM idem_dead_letters
  WHERE %[1]s AND fingerprint COLLATE "C" = g.fingerprint AND reason COLLATE "C" = g.reason
  ORDER BY last_failed_at DESC, id COLLATE "C" LIMIT 1) e
ORDER BY g.n DESC, g.last_seen DESC, g.fingerprint, g.reason`

// GroupDeadLetters returns the groups of the dead letters q selects; see
// readmodel.DeadLetterGrouper.
func (s *Store) GroupDeadLetters(ctx context.Context, q *readmodel.DeadLetterQuery) ([]readmodel.DeadLetterGroup, error) {
	if err := s.check("group dead letters"); err != nil {
		return nil, err
	}
	q, cond, matchable, err := deadLetterRead(q, 6)
	if err != nil || !matchable {
		return nil, err
	}
	key, at := groupsKey(q), time.Now()
	gs, gen, ok := s.groups.get(key, at)
	if ok {
		return gs, nil
	}
	gs, err = s.groupDeadLetters(ctx, q, cond)
	if err == nil {
		s.groups.put(key, gen, at, gs)
	}
	return gs, err
}

// groupDeadLetters reads the groups of the dead letters q selects, with
// the conditions cond of its mark and state.
func (s *Store) groupDeadLetters(ctx context.Context, q *readmodel.DeadLetterQuery, cond string) ([]readmodel.DeadLetterGroup, error) {
	c := *q
	c.After = ""
	args := append(deadLetterArgs(&c), sqlq.Limit(q.Limit))
	if q.AsOf != "" {
		args = append(args, q.AsOf)
	}
	triage, args := triageFilter(q, args)
	rows, err := s.pool.Query(ctx, fmt.Sprintf(groupDeadLettersSQL, deadLetterFilters+cond+triage), args...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: group dead letters: %w", translate(err))
	}
	defer rows.Close()
	var out []readmodel.DeadLetterGroup
	for rows.Next() {
		var g readmodel.DeadLetterGroup
		if err := rows.Scan(&g.Fingerprint, &g.Reason, &g.Count, &g.FirstSeen, &g.LastSeen, &g.SampleError); err != nil {
			return nil, fmt.Errorf("pgstore: group dead letters: %w", err)
		}
		g.FirstSeen, g.LastSeen = g.FirstSeen.UTC(), g.LastSeen.UTC()
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: group dead letters: %w", translate(err))
	}
	return out, nil
}

// ArchiveDeadLetters archives the dead letters among p.IDs that are not
// archived and that p.AsOf selects; see readmodel.DeadLetterArchiver. A zero
// p.At is the database's now().
func (s *Store) ArchiveDeadLetters(ctx context.Context, p *readmodel.ArchiveParams) (int, error) {
	if err := s.check("archive dead letters"); err != nil {
		return 0, err
	}
	asOf, err := asOfFilter(p.AsOf, 3)
	if err != nil {
		return 0, err
	}
	var at *time.Time
	if !p.At.IsZero() {
		at = &p.At
	}
	args := []any{representableIDs(p.IDs), at}
	if asOf != "" {
		args = append(args, p.AsOf)
	}
	if asOf != "" {
		asOf += ` AND ` + archivalAsOf(3)
	}
	defer s.groups.drop()
	ct, err := s.pool.Exec(ctx, `UPDATE idem_dead_letters SET archived_at = coalesce($2::timestamptz, now()), archived_xid = pg_current_xact_id()
WHERE id = ANY($1) AND archived_at IS NULL`+asOf, args...)
	if err != nil {
		return 0, fmt.Errorf("pgstore: archive %d dead letters: %w", len(p.IDs), translate(err))
	}
	return int(ct.RowsAffected()), nil
}

// RestoreDeadLetters restores the archived dead letters among p.IDs that
// p.AsOf selects; see readmodel.DeadLetterArchiver.
func (s *Store) RestoreDeadLetters(ctx context.Context, p *readmodel.ArchiveParams) (int, error) {
	if err := s.check("restore dead letters"); err != nil {
		return 0, err
	}
	asOf, err := asOfFilter(p.AsOf, 2)
	if err != nil {
		return 0, err
	}
	args := []any{representableIDs(p.IDs)}
	if asOf != "" {
		asOf += ` AND ` + archivalAsOf(2)
		args = append(args, p.AsOf)
	}
	defer s.groups.drop()
	ct, err := s.pool.Exec(ctx, `UPDATE idem_dead_letters SET archived_at = NULL, archived_xid = pg_current_xact_id()
WHERE id = ANY($1) AND archived_at IS NOT NULL`+asOf, args...)
	if err != nil {
		return 0, fmt.Errorf("pgstore: restore %d dead letters: %w", len(p.IDs), translate(err))
	}
	return int(ct.RowsAffected()), nil
}

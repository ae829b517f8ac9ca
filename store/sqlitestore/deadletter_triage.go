package sqlitestore

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

// triageWhere is the condition of q's Fingerprint (parameter ?7, NULL for
// any) and of its archival (ArchivedBefore is ?8, 0 for none; the mark is
// ?5, see readmodel.DeadLetterQuery.ArchivalBound), with the values of ?7 and
// ?8.
func triageWhere(q *readmodel.DeadLetterQuery) (string, any, int64) {
	var fp any // NULL: any fingerprint
	switch q.Fingerprint {
	case "":
	case store.FingerprintNone:
		fp = ""
	default:
		fp = q.Fingerprint
	}
	cond := ` AND (?7 IS NULL OR fingerprint = ?7) AND ?8 = ?8`
	if q.ArchivalBound() {
		cond += ` AND archived_seq <= ?5`
	}
	switch {
	case !q.ArchivedBefore.IsZero():
		return cond + ` AND archived_at < ?8`, fp, micros(q.ArchivedBefore)
	case q.Archived == readmodel.ArchivedOnly:
		cond += ` AND archived_at IS NOT NULL`
	case q.Archived == readmodel.ArchivedInclude:
	default:
		cond += ` AND archived_at IS NULL`
	}
	return cond, fp, 0
}

// groupDeadLettersSQL groups the dead letters deadLetterWhere and the
// conditions appended at %s select: per fingerprint and reason, the
// count, first and last seen, and the error of the latest failure.
const groupDeadLettersSQL = `SELECT fingerprint, reason, n, first_seen, last_seen, error FROM (
  SELECT fingerprint, reason, error,
    count(*) OVER w AS n, min(first_failed_at) OVER w AS first_seen, max(last_failed_at) OVER w AS last_seen,
    row_number() OVER (PARTITION BY fingerprint, reason ORDER BY last_failed_at DESC, id) AS rn
  FROM idem_dead_letters WHERE ` + deadLetterWhere + `%s
  WINDOW w AS (PARTITION BY fingerprint, reason))
WHERE rn = 1 ORDER BY n DESC, last_seen DESC, fingerprint, reason LIMIT ?6`

// GroupDeadLetters returns the groups of the dead letters q selects; see
// readmodel.DeadLetterGrouper.
func (s *Store) GroupDeadLetters(ctx context.Context, q *readmodel.DeadLetterQuery) ([]readmodel.DeadLetterGroup, error) {
	if err := s.check("group dead letters"); err != nil {
		return nil, err
	}
	if q == nil {
		q = &readmodel.DeadLetterQuery{}
	}
	mark, err := parseMark(q.AsOf)
	if err != nil {
		return nil, err
	}
	state, err := stateFilter(q.State)
	if err != nil {
		return nil, err
	}
	triage, fp, before := triageWhere(q)
	rows, err := s.rdb.QueryContext(ctx, fmt.Sprintf(groupDeadLettersSQL, state+triage),
		q.SagaType, q.Key, q.Reason, "", mark, sqlq.Limit(q.Limit), fp, before, typeArg(q))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: group dead letters: %w", err)
	}
	defer rows.Close()
	var out []readmodel.DeadLetterGroup
	for rows.Next() {
		var g readmodel.DeadLetterGroup
		var first, last int64
		if err := rows.Scan(&g.Fingerprint, &g.Reason, &g.Count, &first, &last, &g.SampleError); err != nil {
			return nil, fmt.Errorf("sqlitestore: group dead letters: %w", err)
		}
		g.FirstSeen, g.LastSeen = fromMicros(first), fromMicros(last)
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: group dead letters: %w", err)
	}
	return out, nil
}

// ArchiveDeadLetters archives the dead letters among p.IDs that are not
// archived and that p.AsOf selects; see readmodel.DeadLetterArchiver.
func (s *Store) ArchiveDeadLetters(ctx context.Context, p *readmodel.ArchiveParams) (int, error) {
	mark, err := parseMark(p.AsOf)
	if err != nil {
		return 0, err
	}
	at := p.At
	if at.IsZero() {
		at = time.Now()
	}
	return s.eachDeadLetter(ctx, "archive dead letters", p.IDs,
		`UPDATE idem_dead_letters SET archived_at = ?3 WHERE id = ?1 AND archived_at IS NULL AND recorded_seq <= ?2 AND archived_seq <= ?2`, mark, micros(at))
}

// RestoreDeadLetters restores the archived dead letters among p.IDs that
// p.AsOf selects; see
// readmodel.DeadLetterArchiver.
func (s *Store) RestoreDeadLetters(ctx context.Context, p *readmodel.ArchiveParams) (int, error) {
	mark, err := parseMark(p.AsOf)
	if err != nil {
		return 0, err
	}
	return s.eachDeadLetter(ctx, "restore dead letters", p.IDs,
		`UPDATE idem_dead_letters SET archived_at = NULL WHERE id = ?1 AND archived_at IS NOT NULL AND recorded_seq <= ?2 AND archived_seq <= ?2`, mark)
}

// eachDeadLetter runs stmt once per ID (?1) with args after it, in one
// write, and returns how many rows it changed.
func (s *Store) eachDeadLetter(ctx context.Context, op string, ids []string, stmt string, args ...any) (int, error) {
	if err := s.check(op); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	var n int
	err := s.write(ctx, op, 0, func(w *writer) error {
		n = 0
		for _, id := range ids {
			k, err := w.exec(stmt, append([]any{id}, args...)...)
			if err != nil {
				return err
			}
			n += int(k)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: %s (%d): %w", op, len(ids), err)
	}
	return n, nil
}

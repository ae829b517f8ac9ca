package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var (
	_ readmodel.DeadLetterQuerier     = (*Store)(nil)
	_ store.DeadLetterReplayer        = (*Store)(nil)
	_ readmodel.DeadLetterTypeQuerier = (*Store)(nil)
)

// SelectsMessageType reports true: the store selects dead letters by
// readmodel.DeadLetterQuery.MessageType (the column message_type, migration
// 17); see readmodel.DeadLetterTypeQuerier.
func (s *Store) SelectsMessageType() bool { return true }

// asOfFilter is the condition of a mark, parameter $n, or nothing without
// one. The condition is left out rather than guarded: the planner may fold
// a cast of the empty string and fail.
func asOfFilter(asOf string, n int) (string, error) {
	if asOf == "" {
		return "", nil
	}
	if err := checkSnapshotMark(asOf); err != nil {
		return "", err
	}
	return fmt.Sprintf(` AND pg_visible_in_snapshot(recorded_xid, $%d::pg_snapshot)`, n), nil
}

// checkSnapshotMark accepts only what PostgreSQL's pg_snapshot input
// accepts (xmin:xmax:xip,... with 0 < xmin <= xmax and each xip ascending
// in [xmin, xmax)), so that a bad mark is refused as readmodel.ErrBadMark
// before any query instead of coming back as the server's 22P02.
func checkSnapshotMark(asOf string) error {
	bad := fmt.Errorf("pgstore: dead letters as of %.40q: %w", asOf, readmodel.ErrBadMark)
	parts := strings.Split(asOf, ":")
	if len(asOf) > 1<<16 || len(parts) != 3 {
		return bad
	}
	xmin, err1 := parseXid(parts[0])
	xmax, err2 := parseXid(parts[1])
	if err1 != nil || err2 != nil || xmin == 0 || xmax < xmin {
		return bad
	}
	if parts[2] == "" {
		return nil
	}
	last := xmin
	for _, x := range strings.Split(parts[2], ",") {
		xip, err := parseXid(x)
		if err != nil || xip < last || xip >= xmax {
			return bad
		}
		last = xip
	}
	return nil
}

// parseXid reads one unsigned decimal transaction ID, digits only.
func parseXid(s string) (uint64, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, readmodel.ErrBadMark
	}
	return strconv.ParseUint(s, 10, 64)
}

// deadLetterRead is what QueryDeadLetters, CountDeadLetters and
// GroupDeadLetters share: q (the zero query when nil), the conditions of
// its mark (parameter $asOfParam) and its state, and whether a stored dead
// letter can hold its filters' values (a filter PostgreSQL cannot take as
// text matches nothing).
func deadLetterRead(q *readmodel.DeadLetterQuery, asOfParam int) (*readmodel.DeadLetterQuery, string, bool, error) {
	if q == nil {
		q = &readmodel.DeadLetterQuery{}
	}
	asOf, err := asOfFilter(q.AsOf, asOfParam)
	if err != nil {
		return q, "", false, err
	}
	state, err := stateFilter(q.State)
	if err != nil {
		return q, "", false, err
	}
	matchable := representable(q.SagaType, q.Key, q.Reason, q.Fingerprint, q.MessageType)
	return q, asOf + state, matchable, nil
}

// stateFilter is the condition of a state, or nothing for every one. It
// reads latest_outcome, the outcome of the dead letter's latest replay
// (NULL when it has none) that migration 17's triggers keep; the
// unresolved condition is, word for word, the predicate of that
// migration's partial indexes. A "duplicate" replay is resolved: an
// earlier copy of its message was applied.
func stateFilter(st store.DeadLetterState) (string, error) {
	switch st {
	case "", store.DeadLettersAll:
		return "", nil
	case store.DeadLettersUnresolved:
		return ` AND coalesce(latest_outcome, '') NOT IN ('pending', 'succeeded', 'duplicate')`, nil
	case store.DeadLettersResolved:
		return ` AND latest_outcome IN ('succeeded', 'duplicate')`, nil
	case store.DeadLettersPending:
		return ` AND latest_outcome = 'pending'`, nil
	}
	_, err := store.ParseDeadLetterState(string(st))
	return "", fmt.Errorf("pgstore: %w", err)
}

// QueryDeadLetters returns one page of the dead letters q selects; see
// readmodel.DeadLetterQuerier.
func (s *Store) QueryDeadLetters(ctx context.Context, q *readmodel.DeadLetterQuery) ([]store.DeadLetter, error) {
	if err := s.check("query dead letters"); err != nil {
		return nil, err
	}
	q, cond, matchable, err := deadLetterRead(q, 6)
	if err != nil || !matchable || !representable(q.After) {
		return nil, err // no stored dead letter holds such a value
	}
	args := append(deadLetterArgs(q), sqlq.Limit(q.Limit))
	if q.AsOf != "" {
		args = append(args, q.AsOf)
	}
	triage, args := triageFilter(q, args)
	rows, err := s.pool.Query(ctx, `SELECT `+deadLetterCols+` FROM idem_dead_letters WHERE `+deadLetterFilters+cond+triage+`
ORDER BY id COLLATE "C" LIMIT $5`, args...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: query dead letters: %w", translate(err))
	}
	defer rows.Close()
	var out []store.DeadLetter
	for rows.Next() {
		d, err := scanDeadLetter(rows)
		if err != nil {
			return nil, fmt.Errorf("pgstore: query dead letters: %w", err)
		}
		out = append(out, *d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: query dead letters: %w", translate(err))
	}
	return out, s.withReplays(ctx, out)
}

// CountDeadLetters counts the dead letters q selects by reason, and reads
// the mark (the snapshot) in the same read-only, repeatable-read
// transaction; see readmodel.DeadLetterQuerier.
func (s *Store) CountDeadLetters(ctx context.Context, q *readmodel.DeadLetterQuery) (*readmodel.DeadLetterCount, error) {
	if err := s.check("count dead letters"); err != nil {
		return nil, err
	}
	q, cond, matchable, err := deadLetterRead(q, 5)
	if err != nil {
		return nil, err
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("pgstore: count dead letters: %w", translate(err))
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	out := &readmodel.DeadLetterCount{ByReason: map[string]int{}}
	if err := tx.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&out.AsOf); err != nil {
		return nil, fmt.Errorf("pgstore: count dead letters: mark: %w", translate(err))
	}
	if q.AsOf != "" {
		out.AsOf = q.AsOf // counted within the given mark: it stays the bound
	}
	if !matchable {
		return out, nil
	}
	c := *q
	c.After = ""
	args := deadLetterArgs(&c)
	if q.AsOf != "" {
		args = append(args, q.AsOf)
	}
	triage, args := triageFilter(q, args)
	rows, err := tx.Query(ctx, `SELECT reason, count(*) FROM idem_dead_letters WHERE `+deadLetterFilters+cond+triage+` GROUP BY reason`, args...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: count dead letters: %w", translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		var r string
		var n int
		if err := rows.Scan(&r, &n); err != nil {
			return nil, fmt.Errorf("pgstore: count dead letters: %w", err)
		}
		out.ByReason[r] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: count dead letters: %w", translate(err))
	}
	return out, nil
}

// DeleteDeadLettersAsOf removes the dead letters among ids that the mark
// asOf selects; see readmodel.DeadLetterQuerier.
func (s *Store) DeleteDeadLettersAsOf(ctx context.Context, ids []string, asOf string) (int, error) {
	if asOf == "" {
		return s.DeleteDeadLetters(ctx, ids)
	}
	if err := s.check("delete dead letters"); err != nil {
		return 0, err
	}
	if _, err := asOfFilter(asOf, 2); err != nil {
		return 0, err
	}
	defer s.groups.drop()
	ct, err := s.pool.Exec(ctx, `DELETE FROM idem_dead_letters WHERE id = ANY($1) AND pg_visible_in_snapshot(recorded_xid, $2::pg_snapshot) AND `+archivalAsOf(2), ids, asOf)
	if err != nil {
		return 0, fmt.Errorf("pgstore: delete %d dead letters as of a count: %w", len(ids), translate(err))
	}
	return int(ct.RowsAffected()), nil
}

// BeginReplay appends a pending replay to the history of dead letter id;
// see store.DeadLetterReplayer.
func (s *Store) BeginReplay(ctx context.Context, id string, at time.Time) error {
	if err := s.check("begin replay"); err != nil {
		return err
	}
	if !representable(id) {
		return fmt.Errorf("pgstore: replay dead letter %q: %w", id, store.ErrNotFound)
	}
	defer s.groups.drop()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The dead letter's row lock orders concurrent replays; each
		// statement after it reads the replays committed before it.
		ct, err := tx.Exec(ctx, `SELECT 1 FROM idem_dead_letters WHERE id = $1 FOR UPDATE`, id)
		if err != nil {
			return translate(err)
		}
		if ct.RowsAffected() == 0 {
			return store.ErrNotFound
		}
		ct, err = tx.Exec(ctx, `INSERT INTO idem_dead_letter_replays (dead_letter_id, replayed_at, outcome, replayed_by)
SELECT id, $2, 'pending', $3 FROM idem_dead_letters WHERE id = $1 AND coalesce(latest_outcome, '') <> 'pending'`, id, at, storableText(store.ReplayBy(ctx)))
		if err != nil {
			return translate(err)
		}
		if ct.RowsAffected() == 0 {
			return store.ErrReplayPending
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgstore: replay dead letter %s: %w", id, err)
	}
	return nil
}

// SettleReplays settles the pending latest replay of each dead letter
// p.IDs names; see store.DeadLetterReplayer.
func (s *Store) SettleReplays(ctx context.Context, p *store.SettleReplaysParams) error {
	if err := s.check("settle replays"); err != nil {
		return err
	}
	ids := representableIDs(p.IDs)
	if len(ids) == 0 {
		return nil
	}
	defer s.groups.drop()
	_, err := s.pool.Exec(ctx, settleReplaysSQL, ids, string(p.Outcome), p.At, storableText(p.Error))
	if err != nil {
		return fmt.Errorf("pgstore: settle replays of %d dead letters: %w", len(ids), translate(err))
	}
	return nil
}

// settleReplaysSQL settles the latest replay of each dead letter $1 names
// if it is pending. It locks the dead letters' rows first, in one order
// (the aggregate reads them all before any replay is updated), as
// recording a dead letter locks its row before its replays: the replays'
// trigger (migration 17) then writes those rows, and two writers never
// wait on each other in opposite orders.
const settleReplaysSQL = `WITH locked AS MATERIALIZED (SELECT id FROM idem_dead_letters WHERE id = ANY($1) ORDER BY id COLLATE "C" FOR UPDATE)
UPDATE idem_dead_letter_replays r SET outcome = $2, settled_at = $3, error = $4
FROM (SELECT dead_letter_id, max(seq) AS seq FROM idem_dead_letter_replays WHERE dead_letter_id IN (SELECT id FROM locked) GROUP BY dead_letter_id) l
WHERE r.seq = l.seq AND r.outcome = 'pending'`

// representableIDs is ids without those PostgreSQL cannot take (no
// stored dead letter has them).
func representableIDs(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if representable(id) {
			out = append(out, id)
		}
	}
	return out
}

// withReplays reads the replay history of ds.
func (s *Store) withReplays(ctx context.Context, ds []store.DeadLetter) error {
	if len(ds) == 0 {
		return nil
	}
	ids := make([]string, len(ds))
	at := make(map[string]int, len(ds))
	for i := range ds {
		ids[i], at[ds[i].ID] = ds[i].ID, i
	}
	rows, err := s.pool.Query(ctx, `SELECT dead_letter_id, replayed_at, outcome, settled_at, reason, error, replayed_by
FROM idem_dead_letter_replays WHERE dead_letter_id = ANY($1) ORDER BY seq`, ids)
	if err != nil {
		return fmt.Errorf("pgstore: replays of %d dead letters: %w", len(ids), translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		var id, outcome string
		var r store.Replay
		var settled *time.Time
		if err := rows.Scan(&id, &r.At, &outcome, &settled, &r.Reason, &r.Error, &r.By); err != nil {
			return fmt.Errorf("pgstore: replays of %d dead letters: %w", len(ids), err)
		}
		r.Outcome, r.At = store.ReplayOutcome(outcome), r.At.UTC()
		if settled != nil {
			r.SettledAt = settled.UTC()
		}
		d := &ds[at[id]]
		d.Replays = append(d.Replays, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgstore: replays of %d dead letters: %w", len(ids), translate(err))
	}
	return nil
}

// storableText is s as a text column takes it: valid UTF-8 without U+0000.
func storableText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\\x00")
}

package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

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
// readmodel.DeadLetterQuery.MessageType; see readmodel.DeadLetterTypeQuerier.
func (s *Store) SelectsMessageType() bool { return true }

// deadLetterWhere selects dead letters by saga type ?1, key ?2, reason ?3,
// message type ?9 (the envelope's; empty: any), after the ID ?4 and
// recorded no later than the mark ?5.
const deadLetterWhere = `(?1 = '' OR saga_type = ?1) AND (?2 = '' OR key = ?2) AND (?3 = '' OR reason = ?3)
  AND (?4 = '' OR id > ?4) AND recorded_seq <= ?5
  AND (?9 = '' OR (json_valid(envelope) AND json_extract(envelope, '$.type') = ?9))`

// latestOutcome is the outcome of a dead letter's latest replay, NULL
// when it has none (read from the index on (dead_letter_id, seq)).
const latestOutcome = `(SELECT r.outcome FROM idem_dead_letter_replays r WHERE r.dead_letter_id = idem_dead_letters.id ORDER BY r.seq DESC LIMIT 1)`

// stateFilter is the condition of a state, or nothing for every one.
func stateFilter(st store.DeadLetterState) (string, error) {
	switch st {
	case "", store.DeadLettersAll:
		return "", nil
	case store.DeadLettersUnresolved:
		return ` AND coalesce(` + latestOutcome + `, '') NOT IN ('pending', 'succeeded', 'duplicate')`, nil
	case store.DeadLettersResolved:
		// A duplicate's message was applied by an earlier copy.
		return ` AND ` + latestOutcome + ` IN ('succeeded', 'duplicate')`, nil
	case store.DeadLettersPending:
		return ` AND ` + latestOutcome + ` = 'pending'`, nil
	}
	_, err := store.ParseDeadLetterState(string(st))
	return "", fmt.Errorf("sqlitestore: %w", err)
}

// parseMark reads a mark CountDeadLetters made; "" is no bound.
func parseMark(asOf string) (int64, error) {
	if asOf == "" {
		return 1<<63 - 1, nil
	}
	n, err := strconv.ParseInt(asOf, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("sqlitestore: dead letters as of %.40q: %w", asOf, readmodel.ErrBadMark)
	}
	return n, nil
}

// QueryDeadLetters returns one page of the dead letters q selects; see
// readmodel.DeadLetterQuerier.
func (s *Store) QueryDeadLetters(ctx context.Context, q *readmodel.DeadLetterQuery) ([]store.DeadLetter, error) {
	if err := s.check("query dead letters"); err != nil {
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
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+deadLetterCols+` FROM idem_dead_letters WHERE `+deadLetterWhere+state+triage+` ORDER BY id LIMIT ?6`,
		q.SagaType, q.Key, q.Reason, q.After, mark, sqlq.Limit(q.Limit), fp, before, typeArg(q))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: query dead letters: %w", err)
	}
	out, err := collectDeadLetters(rows, "query dead letters")
	if err != nil {
		return nil, err
	}
	return out, s.withReplays(ctx, s.rdb, out)
}

// CountDeadLetters counts the dead letters q selects by reason, and reads
// the mark in the same read transaction; see readmodel.DeadLetterQuerier.
func (s *Store) CountDeadLetters(ctx context.Context, q *readmodel.DeadLetterQuery) (*readmodel.DeadLetterCount, error) {
	if err := s.check("count dead letters"); err != nil {
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
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: count dead letters: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var last int64
	if err := tx.QueryRowContext(ctx, `SELECT last FROM idem_dead_letter_marks WHERE id = 1`).Scan(&last); err != nil {
		return nil, fmt.Errorf("sqlitestore: count dead letters: mark: %w", err)
	}
	out := &readmodel.DeadLetterCount{ByReason: map[string]int{}, AsOf: strconv.FormatInt(min(last, mark), 10)}
	triage, fp, before := triageWhere(q)
	rows, err := tx.QueryContext(ctx, `SELECT reason, count(*) FROM idem_dead_letters WHERE `+deadLetterWhere+state+triage+` GROUP BY reason`,
		q.SagaType, q.Key, q.Reason, "", mark, 0, fp, before, typeArg(q))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: count dead letters: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r string
		var n int
		if err := rows.Scan(&r, &n); err != nil {
			return nil, fmt.Errorf("sqlitestore: count dead letters: %w", err)
		}
		out.ByReason[r] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: count dead letters: %w", err)
	}
	return out, nil
}

// DeleteDeadLettersAsOf removes the dead letters among ids that the mark
// asOf selects; see readmodel.DeadLetterQuerier.
func (s *Store) DeleteDeadLettersAsOf(ctx context.Context, ids []string, asOf string) (int, error) {
	mark, err := parseMark(asOf)
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	var n int
	err = s.write(ctx, "delete dead letters", 0, func(w *writer) error {
		n = 0
		for _, id := range ids {
			k, err := w.exec(`DELETE FROM idem_dead_letters WHERE id = ?1 AND recorded_seq <= ?2 AND archived_seq <= ?2`, id, mark)
			if err != nil {
				return err
			}
			n += int(k)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: delete %d dead letters: %w", len(ids), err)
	}
	return n, nil
}

// BeginReplay appends a pending replay to the history of dead letter id;
// see store.DeadLetterReplayer.
func (s *Store) BeginReplay(ctx context.Context, id string, at time.Time) error {
	var n, found int64
	err := s.write(ctx, "begin replay", 0, func(w *writer) error {
		var err error
		n, err = w.exec(`INSERT INTO idem_dead_letter_replays (dead_letter_id, replayed_at, outcome, replayed_by)
SELECT id, ?2, 'pending', ?3 FROM idem_dead_letters WHERE id = ?1 AND coalesce(`+latestOutcome+`, '') <> 'pending'`, id, micros(at), strings.ToValidUTF8(store.ReplayBy(ctx), "\uFFFD"))
		if err != nil || n > 0 {
			return err
		}
		rows, err := w.query(`SELECT count(*) FROM idem_dead_letters WHERE id = ?1`, id)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := rows.Scan(&found); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	switch {
	case err != nil:
		return fmt.Errorf("sqlitestore: replay dead letter %s: %w", id, err)
	case n == 0 && found == 0:
		return fmt.Errorf("sqlitestore: replay dead letter %s: %w", id, store.ErrNotFound)
	case n == 0:
		return fmt.Errorf("sqlitestore: replay dead letter %s: %w", id, store.ErrReplayPending)
	}
	return nil
}

// SettleReplays settles the pending latest replay of each dead letter
// p.IDs names; see store.DeadLetterReplayer.
func (s *Store) SettleReplays(ctx context.Context, p *store.SettleReplaysParams) error {
	if len(p.IDs) == 0 {
		return nil
	}
	errText := strings.ToValidUTF8(p.Error, "\uFFFD")
	err := s.write(ctx, "settle replays", 0, func(w *writer) error {
		for _, id := range p.IDs {
			_, err := w.exec(settleReplaySQL, id, string(p.Outcome), micros(p.At), errText)
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: settle replays of %d dead letters: %w", len(p.IDs), err)
	}
	return nil
}

// settleReplaySQL settles dead letter ?1's latest replay if it is pending.
const settleReplaySQL = `UPDATE idem_dead_letter_replays SET outcome = ?2, settled_at = ?3, error = ?4
WHERE seq = (SELECT max(seq) FROM idem_dead_letter_replays WHERE dead_letter_id = ?1) AND outcome = 'pending'`

// querier is what withReplays reads through: the read pool or a
// transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// withReplays reads the replay history of ds.
func (s *Store) withReplays(ctx context.Context, db querier, ds []store.DeadLetter) error {
	if len(ds) == 0 {
		return nil
	}
	at := make(map[string]int, len(ds))
	for i := range ds {
		at[ds[i].ID] = i
	}
	args := make([]any, len(ds))
	marks := make([]string, len(ds))
	for i := range ds {
		args[i], marks[i] = ds[i].ID, "?"
	}
	rows, err := db.QueryContext(ctx, `SELECT dead_letter_id, replayed_at, outcome, settled_at, reason, error, replayed_by
FROM idem_dead_letter_replays WHERE dead_letter_id IN (`+strings.Join(marks, ",")+`) ORDER BY seq`, args...)
	if err != nil {
		return fmt.Errorf("sqlitestore: replays of %d dead letters: %w", len(ds), err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, outcome string
		var replayed int64
		var settled sql.NullInt64
		var r store.Replay
		if err := rows.Scan(&id, &replayed, &outcome, &settled, &r.Reason, &r.Error, &r.By); err != nil {
			return fmt.Errorf("sqlitestore: replays of %d dead letters: %w", len(ds), err)
		}
		r.At, r.Outcome, r.SettledAt = fromMicros(replayed), store.ReplayOutcome(outcome), fromNullMicros(settled)
		d := &ds[at[id]]
		d.Replays = append(d.Replays, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlitestore: replays of %d dead letters: %w", len(ds), err)
	}
	return nil
}

// collectDeadLetters reads and closes rows of deadLetterCols; op names the
// read in its errors.
func collectDeadLetters(rows *sql.Rows, op string) ([]store.DeadLetter, error) {
	defer rows.Close()
	var out []store.DeadLetter
	for rows.Next() {
		d, err := scanDeadLetter(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: %s: %w", op, err)
		}
		out = append(out, *d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: %s: %w", op, err)
	}
	return out, nil
}

// typeArg is the value of the message-type filter ?9: q.MessageType, or
// NULL (which selects nothing) when it holds U+0000, as on every store
// (see readmodel.DeadLetterTypeQuerier).
func typeArg(q *readmodel.DeadLetterQuery) any {
	if strings.Contains(q.MessageType, "\x00") {
		return nil
	}
	return q.MessageType
}

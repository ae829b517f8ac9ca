package pgstore

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
)

var _ store.DeadLetterQuerier = (*Store)(nil)

// The dead-letter filters, compared in COLLATE "C" so that the indexes of
// migration 009 serve them: $1 saga type, $2 key, $3 reason, $4 after (an
// empty value means any).
const deadLetterFilters = `($1 = '' OR saga_type COLLATE "C" = $1) AND ($2 = '' OR key COLLATE "C" = $2)
  AND ($3 = '' OR reason COLLATE "C" = $3) AND ($4 = '' OR id COLLATE "C" > $4 COLLATE "C")`

func deadLetterArgs(q *store.DeadLetterQuery) []any {
	// An unnamed statement is planned with its values: the empty filters
	// drop out and the rest become index conditions.
	return []any{pgx.QueryExecModeExec, q.SagaType, q.Key, q.Reason, q.After}
}

// QueryDeadLetters returns one page of the dead letters q selects; see
// store.DeadLetterQuerier.
func (s *Store) QueryDeadLetters(ctx context.Context, q *store.DeadLetterQuery) ([]store.DeadLetter, error) {
	if err := s.check("query dead letters"); err != nil {
		return nil, err
	}
	if q == nil {
		q = &store.DeadLetterQuery{}
	}
	if !representable(q.SagaType, q.Key, q.Reason, q.After) {
		return nil, nil // no stored dead letter holds such a value
	}
	rows, err := s.pool.Query(ctx, `SELECT `+deadLetterCols+` FROM idem_dead_letters WHERE `+deadLetterFilters+`
ORDER BY id COLLATE "C" LIMIT $5`, append(deadLetterArgs(q), sqlq.Limit(q.Limit))...)
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
	return out, nil
}

// CountDeadLetters counts the dead letters q selects by reason; see
// store.DeadLetterQuerier.
func (s *Store) CountDeadLetters(ctx context.Context, q *store.DeadLetterQuery) (map[string]int, error) {
	if err := s.check("count dead letters"); err != nil {
		return nil, err
	}
	if q == nil {
		q = &store.DeadLetterQuery{}
	}
	if !representable(q.SagaType, q.Key, q.Reason) {
		return map[string]int{}, nil
	}
	c := *q
	c.After = ""
	rows, err := s.pool.Query(ctx, `SELECT reason, count(*) FROM idem_dead_letters WHERE `+deadLetterFilters+` GROUP BY reason`, deadLetterArgs(&c)...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: count dead letters: %w", translate(err))
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var r string
		var n int
		if err := rows.Scan(&r, &n); err != nil {
			return nil, fmt.Errorf("pgstore: count dead letters: %w", err)
		}
		out[r] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: count dead letters: %w", translate(err))
	}
	return out, nil
}

// representable reports whether PostgreSQL can take every value as text:
// valid UTF-8 without U+0000. A filter that is not can match nothing
// stored, and sending it would fail the query (SQLSTATE 22021).
func representable(vals ...string) bool {
	for _, v := range vals {
		if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return false
		}
	}
	return true
}

package pgstore

import (
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store/readmodel"
)

// The dead-letter filters, compared in COLLATE "C" so that the indexes of
// migration 009 serve them: $1 saga type, $2 key, $3 reason, $4 after (an
// empty value means any).
const deadLetterFilters = `($1 = '' OR saga_type COLLATE "C" = $1) AND ($2 = '' OR key COLLATE "C" = $2)
  AND ($3 = '' OR reason COLLATE "C" = $3) AND ($4 = '' OR id COLLATE "C" > $4 COLLATE "C")`

func deadLetterArgs(q *readmodel.DeadLetterQuery) []any {
	// An unnamed statement is planned with its values: the empty filters
	// drop out and the rest become index conditions.
	return []any{pgx.QueryExecModeExec, q.SagaType, q.Key, q.Reason, q.After}
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

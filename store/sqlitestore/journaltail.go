package sqlitestore

import (
	"context"
	"fmt"
	"slices"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var _ readmodel.JournalTailer = (*Store)(nil)

// journalTailSQL reads the latest ?3 entries of one journal, newest first,
// through the index on (saga_type, key, id), each row with the journal's
// length: the uncorrelated subquery is counted once, from the same index,
// in the statement's read transaction.
const journalTailSQL = `
SELECT (SELECT count(*) FROM idem_journal WHERE saga_type = ?1 AND key = ?2),
       saga_type, key, raw_key, message_id, event_type, from_state, to_state, version, at, payload, diff, detail, state
FROM idem_journal WHERE saga_type = ?1 AND key = ?2 ORDER BY id DESC LIMIT ?3`

const journalCountSQL = `SELECT count(*) FROM idem_journal WHERE saga_type = ?1 AND key = ?2`

// JournalTail returns the latest n entries of k's journal, oldest first,
// and the journal's length; see readmodel.JournalTailer.
func (s *Store) JournalTail(ctx context.Context, k store.Key, n int) ([]store.JournalEntry, int, error) {
	if err := s.check("journal tail"); err != nil {
		return nil, 0, err
	}
	var total int
	if n <= 0 {
		if err := s.rdb.QueryRowContext(ctx, journalCountSQL, k.SagaType, k.Key).Scan(&total); err != nil {
			return nil, 0, fmt.Errorf("sqlitestore: journal tail %s/%s: %w", k.SagaType, k.Key, err)
		}
		return nil, total, nil
	}
	rows, err := s.rdb.QueryContext(ctx, journalTailSQL, k.SagaType, k.Key, n)
	if err != nil {
		return nil, 0, fmt.Errorf("sqlitestore: journal tail %s/%s: %w", k.SagaType, k.Key, err)
	}
	defer rows.Close()
	var out []store.JournalEntry
	for rows.Next() {
		var j store.JournalEntry
		var at int64
		var d detailCols
		if err := rows.Scan(&total, &j.SagaType, &j.Key, &j.RawKey, &j.MessageID, &j.EventType, &j.FromState, &j.ToState, &j.Version, &at, &d.payload, &d.diff, &d.detail, &d.state); err != nil {
			return nil, 0, fmt.Errorf("sqlitestore: journal tail %s/%s: %w", k.SagaType, k.Key, err)
		}
		j.At = fromMicros(at)
		if err := d.decode(&j); err != nil {
			return nil, 0, fmt.Errorf("sqlitestore: journal tail %s/%s: %w", k.SagaType, k.Key, err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("sqlitestore: journal tail %s/%s: %w", k.SagaType, k.Key, err)
	}
	slices.Reverse(out)
	return out, total, nil
}

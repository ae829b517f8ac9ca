package pgstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var _ readmodel.JournalTailer = (*Store)(nil)

// journalTailSQL reads the latest $3 entries of one journal, newest first,
// through the index on (saga_type, key, id), each row with the journal's
// length: the uncorrelated subquery is counted once, from the same index,
// in the statement's snapshot.
const journalTailSQL = `
SELECT (SELECT count(*) FROM idem_journal WHERE saga_type = $1 AND key = $2),
       saga_type, key, raw_key, message_id, event_type, from_state, to_state, version, at, payload, diff, state, coalesce(detail, '')
FROM idem_journal WHERE saga_type = $1 AND key = $2 ORDER BY id DESC LIMIT $3`

const journalCountSQL = `SELECT count(*) FROM idem_journal WHERE saga_type = $1 AND key = $2`

// JournalTail returns the latest n entries of k's journal, oldest first,
// and the journal's length; see readmodel.JournalTailer.
func (s *Store) JournalTail(ctx context.Context, k store.Key, n int) ([]store.JournalEntry, int, error) {
	if err := s.check("journal tail"); err != nil {
		return nil, 0, err
	}
	if !representable(k.SagaType, k.Key) {
		return nil, 0, nil // no stored entry has such a key
	}
	var total int
	if n <= 0 {
		if err := s.pool.QueryRow(ctx, journalCountSQL, k.SagaType, k.Key).Scan(&total); err != nil {
			return nil, 0, fmt.Errorf("pgstore: journal tail %s/%s: %w", k.SagaType, k.Key, translate(err))
		}
		return nil, total, nil
	}
	rows, err := s.pool.Query(ctx, journalTailSQL, k.SagaType, k.Key, n)
	if err != nil {
		return nil, 0, fmt.Errorf("pgstore: journal tail %s/%s: %w", k.SagaType, k.Key, translate(err))
	}
	defer rows.Close()
	var out []store.JournalEntry
	for rows.Next() {
		var j store.JournalEntry
		var d sqlq.JournalDetail
		if err := rows.Scan(&total, &j.SagaType, &j.Key, &j.RawKey, &j.MessageID, &j.EventType, &j.FromState, &j.ToState, &j.Version, &j.At, &d.Payload, &d.Diff, &d.State, &d.Detail); err != nil {
			return nil, 0, fmt.Errorf("pgstore: journal tail %s/%s: %w", k.SagaType, k.Key, err)
		}
		j.At = j.At.UTC()
		if j.JournalDetail, err = sqlq.DecodeJournalDetail(d); err != nil {
			return nil, 0, fmt.Errorf("pgstore: journal tail %s/%s: %w", k.SagaType, k.Key, err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("pgstore: journal tail %s/%s: %w", k.SagaType, k.Key, translate(err))
	}
	slices.Reverse(out)
	return out, total, nil
}

package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var _ readmodel.OutboxSentReader = (*Store)(nil)

// journalDetailCols are the detail columns of a batch of journal entries,
// as insertJournalSQL takes them (nil bytes are NULL, "" detail is NULL).
type journalDetailCols struct {
	payloads, diffs, states [][]byte
	details                 []string
}

func journalDetails(journal []store.JournalEntry) (journalDetailCols, error) {
	n := len(journal)
	c := journalDetailCols{payloads: make([][]byte, n), diffs: make([][]byte, n), states: make([][]byte, n), details: make([]string, n)}
	for i := range journal {
		d, err := sqlq.EncodeJournalDetail(&journal[i].JournalDetail)
		if err != nil {
			return c, fmt.Errorf("pgstore: journal %s/%s: %w", journal[i].SagaType, journal[i].Key, err)
		}
		c.payloads[i], c.diffs[i], c.states[i], c.details[i] = d.Payload, d.Diff, d.State, d.Detail
	}
	return c, nil
}

const outboxSentSQL = `SELECT id, sent_at FROM idem_outbox WHERE id = ANY($1::text[])`

// OutboxSent reports the sent time of each of ids still in the outbox
// (zero while unsent); see readmodel.OutboxSentReader.
func (s *Store) OutboxSent(ctx context.Context, ids []string) (map[string]time.Time, error) {
	if err := s.check("outbox sent"); err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, outboxSentSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("pgstore: outbox sent: %w", translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var sent pgtype.Timestamptz
		if err := rows.Scan(&id, &sent); err != nil {
			return nil, fmt.Errorf("pgstore: outbox sent: %w", err)
		}
		out[id] = time.Time{}
		if sent.Valid {
			out[id] = sent.Time.UTC()
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: outbox sent: %w", translate(err))
	}
	return out, nil
}

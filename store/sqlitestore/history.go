package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var _ readmodel.OutboxSentReader = (*Store)(nil)

// journalArgs are insertJournalSQL's arguments for j: its detail columns
// are NULL when j records none.
func journalArgs(j *store.JournalEntry) ([]any, error) {
	d, err := sqlq.EncodeJournalDetail(&j.JournalDetail)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: journal %s/%s: %w", j.SagaType, j.Key, err)
	}
	args := []any{j.SagaType, j.Key, j.RawKey, j.MessageID, j.EventType, j.FromState, j.ToState, j.Version, micros(j.At), nil, nil, nil, nil}
	if d.Payload != nil {
		args[9] = d.Payload
	}
	if d.Diff != nil {
		args[10] = d.Diff
	}
	if d.Detail != "" {
		args[11] = d.Detail
	}
	if d.State != nil {
		args[12] = d.State
	}
	return args, nil
}

// detailCols scans a journal row's detail columns.
type detailCols struct {
	payload, diff, state []byte
	detail               sql.NullString
}

func (c *detailCols) decode(j *store.JournalEntry) error {
	d, err := sqlq.DecodeJournalDetail(sqlq.JournalDetail{Payload: c.payload, Diff: c.diff, State: c.state, Detail: c.detail.String})
	j.JournalDetail = d
	return err
}

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
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	q := `SELECT id, sent_at FROM idem_outbox WHERE id IN (?` + strings.Repeat(", ?", len(ids)-1) + `)`
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: outbox sent: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var sent sql.NullInt64
		if err := rows.Scan(&id, &sent); err != nil {
			return nil, fmt.Errorf("sqlitestore: outbox sent: %w", err)
		}
		out[id] = time.Time{}
		if sent.Valid {
			out[id] = fromMicros(sent.Int64)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: outbox sent: %w", err)
	}
	return out, nil
}

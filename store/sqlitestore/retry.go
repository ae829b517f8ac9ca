package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/idemhq/idem/store"
)

var _ store.RetryRecorder = (*Store)(nil)

const retryCols = `id, saga_type, key, message_id, message_type, attempts, error, first_failed_at, last_failed_at, next_attempt_at,
envelope, body, retry_now_at`

// recordRetrySQL replaces a retry but keeps its first_failed_at, and its
// envelope and retry_now_at when the new one has none; a failure after a
// retry now replaces it whatever its attempts (store.RetryRecorder).
const recordRetrySQL = `
INSERT INTO idem_retries (` + retryCols + `) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
ON CONFLICT (id) DO UPDATE
SET saga_type = excluded.saga_type, key = excluded.key, message_id = excluded.message_id, message_type = excluded.message_type,
    attempts = max(excluded.attempts, idem_retries.attempts), error = excluded.error,
    last_failed_at = excluded.last_failed_at, next_attempt_at = excluded.next_attempt_at,
    envelope = coalesce(excluded.envelope, idem_retries.envelope), body = coalesce(excluded.body, idem_retries.body),
    retry_now_at = coalesce(excluded.retry_now_at, idem_retries.retry_now_at)
WHERE excluded.attempts >= idem_retries.attempts
   OR (idem_retries.retry_now_at IS NOT NULL AND excluded.last_failed_at >= idem_retries.retry_now_at)`

// sweepRetriesSQL deletes up to ?2 retries whose next attempt is before
// ?1, oldest first.
const sweepRetriesSQL = `
DELETE FROM idem_retries WHERE id IN (
  SELECT id FROM idem_retries WHERE next_attempt_at < ?1 ORDER BY next_attempt_at, id LIMIT ?2
)`

const retriesOfSQL = `SELECT ` + retryCols + ` FROM idem_retries WHERE saga_type = ?1 AND key = ?2 ORDER BY first_failed_at, id LIMIT ?3`

// queryRetriesSQL: ?1 the saga type (empty for any), ?2 and ?3 the cursor, ?4
// whether there is one, ?5 the limit.
const queryRetriesSQL = `
SELECT ` + retryCols + ` FROM idem_retries
WHERE (?1 = '' OR saga_type = ?1) AND (NOT ?4 OR first_failed_at > ?2 OR (first_failed_at = ?2 AND id > ?3))
ORDER BY first_failed_at, id LIMIT ?5`

const clearRetrySQL = `DELETE FROM idem_retries WHERE id = ?1`

// RecordRetry stores r (see store.RetryRecorder) in a write of its own.
func (s *Store) RecordRetry(ctx context.Context, r *store.Retry) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("sqlitestore: record retry: %w", err)
	}
	args, err := recordRetryArgs(r)
	if err != nil {
		return fmt.Errorf("sqlitestore: record retry %q: %w", r.ID, err)
	}
	err = s.write(ctx, "record retry", 0, func(w *writer) error {
		_, err := w.exec(recordRetrySQL, args...)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: record retry %q: %w", r.ID, err)
	}
	return nil
}

// Retries returns the retries of the saga k (see store.RetryRecorder).
func (s *Store) Retries(ctx context.Context, k store.Key) ([]store.Retry, error) {
	if err := s.check("retries"); err != nil {
		return nil, err
	}
	if !store.Storable(k.SagaType) || !store.Storable(k.Key) {
		return nil, nil
	}
	rows, err := s.rdb.QueryContext(ctx, retriesOfSQL, k.SagaType, k.Key, store.MaxRetriesOf)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: retries of %s/%s: %w", k.SagaType, k.Key, err)
	}
	out, err := scanRetries(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: retries of %s/%s: %w", k.SagaType, k.Key, err)
	}
	return out, nil
}

// QueryRetries returns one page of the retries q selects (see
// store.RetryRecorder).
func (s *Store) QueryRetries(ctx context.Context, q *store.RetryQuery) ([]store.Retry, error) {
	if err := s.check("query retries"); err != nil {
		return nil, err
	}
	if q == nil {
		q = &store.RetryQuery{}
	}
	cursor := q.AfterID != "" || !q.AfterFirstFailedAt.IsZero()
	rows, err := s.rdb.QueryContext(ctx, queryRetriesSQL, q.SagaType, micros(q.AfterFirstFailedAt), q.AfterID, cursor, q.PageLimit())
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: query retries: %w", err)
	}
	out, err := scanRetries(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: query retries: %w", err)
	}
	return out, nil
}

func scanRetries(rows *sql.Rows) ([]store.Retry, error) {
	defer rows.Close()
	var out []store.Retry
	for rows.Next() {
		var r store.Retry
		var first, last, next int64
		var meta sql.NullString
		var body []byte
		var nowAt sql.NullInt64
		if err := rows.Scan(&r.ID, &r.SagaType, &r.Key, &r.MessageID, &r.MessageType, &r.Attempts, &r.Error, &first, &last, &next,
			&meta, &body, &nowAt); err != nil {
			return nil, err
		}
		r.FirstFailedAt, r.LastFailedAt, r.NextAttemptAt = fromMicros(first), fromMicros(last), fromMicros(next)
		if nowAt.Valid {
			r.RetryNowAt = fromMicros(nowAt.Int64)
		}
		if err := decodeRetryEnvelope(&r, meta, body); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// clearRetryOps deletes the retries c clears, in the commit.
func clearRetryOps(c *store.Changes) []op {
	ops := make([]op, 0, len(c.ClearRetries))
	for _, id := range c.ClearRetries {
		ops = append(ops, op{sql: clearRetrySQL, args: []any{id}})
	}
	return ops
}

func recordRetryArgs(r *store.Retry) ([]any, error) {
	meta, body, err := encodeRetryEnvelope(r)
	if err != nil {
		return nil, err
	}
	var nowAt sql.NullInt64
	if !r.RetryNowAt.IsZero() {
		nowAt = sql.NullInt64{Int64: micros(r.RetryNowAt), Valid: true}
	}
	return []any{r.ID, r.SagaType, r.Key, r.MessageID, r.MessageType, r.Attempts, store.RetryText(r.Error),
		micros(r.FirstFailedAt), micros(r.LastFailedAt), micros(r.NextAttemptAt), meta, body, nowAt}, nil
}

// recordRetryOps records the retries c records, in the commit, after the
// ones it clears. A retry Validate refuses fails the commit.
func recordRetryOps(c *store.Changes) ([]op, error) {
	ops := make([]op, 0, len(c.RecordRetries))
	for i := range c.RecordRetries {
		r := &c.RecordRetries[i]
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("sqlitestore: commit: record retry: %w", err)
		}
		args, err := recordRetryArgs(r)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: commit: record retry %q: %w", r.ID, err)
		}
		ops = append(ops, op{sql: recordRetrySQL, args: args})
	}
	return ops, nil
}

var _ store.RetrySweeper = (*Store)(nil)

// SweepRetries deletes at most p.Limit retries whose NextAttemptAt is
// before p.NextAttemptBefore, oldest first (see store.RetrySweeper).
func (s *Store) SweepRetries(ctx context.Context, p *store.StaleRetries) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("sqlitestore: sweep retries: %w", err)
	}
	if p.NextAttemptBefore.IsZero() {
		return 0, nil
	}
	var n int64
	err := s.write(ctx, "sweep retries", 0, func(w *writer) error {
		var err error
		n, err = w.exec(sweepRetriesSQL, micros(p.NextAttemptBefore), p.Limit)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: sweep retries: %w", err)
	}
	return int(n), nil
}

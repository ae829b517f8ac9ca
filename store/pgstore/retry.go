package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

var _ store.RetryRecorder = (*Store)(nil)

const retryCols = `id, saga_type, key, message_id, message_type, attempts, error, first_failed_at, last_failed_at, next_attempt_at,
envelope, body, retry_now_at`

// recordRetrySQL replaces a retry but keeps its first_failed_at, and its
// envelope and retry_now_at when the new one has none; a failure after a
// retry now replaces it whatever its attempts (store.RetryRecorder).
const recordRetrySQL = `
INSERT INTO idem_retries (` + retryCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::text::json, $12, $13)
ON CONFLICT (id) DO UPDATE
SET saga_type = excluded.saga_type, key = excluded.key, message_id = excluded.message_id, message_type = excluded.message_type,
    attempts = GREATEST(excluded.attempts, idem_retries.attempts), error = excluded.error,
    last_failed_at = excluded.last_failed_at, next_attempt_at = excluded.next_attempt_at,
    envelope = COALESCE(excluded.envelope, idem_retries.envelope), body = COALESCE(excluded.body, idem_retries.body),
    retry_now_at = COALESCE(excluded.retry_now_at, idem_retries.retry_now_at)
WHERE excluded.attempts >= idem_retries.attempts
   OR (idem_retries.retry_now_at IS NOT NULL AND excluded.last_failed_at >= idem_retries.retry_now_at)`

// sweepRetriesSQL deletes up to $2 retries whose next attempt is before
// $1, oldest first.
const sweepRetriesSQL = `
DELETE FROM idem_retries WHERE id IN (
  SELECT id FROM idem_retries WHERE next_attempt_at < $1 ORDER BY next_attempt_at, id LIMIT $2 FOR UPDATE SKIP LOCKED
)`

const retriesOfSQL = `SELECT ` + retryCols + ` FROM idem_retries WHERE saga_type = $1 AND key = $2 ORDER BY first_failed_at, id LIMIT $3`

// queryRetriesSQL: $1 the saga type (empty for any), $2 and $3 the
// cursor, $4 whether there is one, $5 the limit.
const queryRetriesSQL = `
SELECT ` + retryCols + ` FROM idem_retries
WHERE ($1 = '' OR saga_type = $1) AND (NOT $4 OR (first_failed_at, id) > ($2, $3))
ORDER BY first_failed_at, id LIMIT $5`

const clearRetriesSQL = `DELETE FROM idem_retries WHERE id = ANY($1::text[])`

// RecordRetry stores r (see store.RetryRecorder) in a statement of its
// own.
func (s *Store) RecordRetry(ctx context.Context, r *store.Retry) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("pgstore: record retry: %w", err)
	}
	args, err := recordRetryArgs(r)
	if err != nil {
		return fmt.Errorf("pgstore: record retry %q: %w", r.ID, err)
	}
	_, err = s.pool.Exec(ctx, recordRetrySQL, args...)
	if err != nil {
		return fmt.Errorf("pgstore: record retry %q: %w", r.ID, translate(err))
	}
	return nil
}

// Retries returns the retries of the saga k (see store.RetryRecorder).
func (s *Store) Retries(ctx context.Context, k store.Key) ([]store.Retry, error) {
	if !representable(k.SagaType, k.Key) {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, retriesOfSQL, k.SagaType, k.Key, store.MaxRetriesOf)
	if err != nil {
		return nil, fmt.Errorf("pgstore: retries of %s/%s: %w", k.SagaType, k.Key, translate(err))
	}
	out, err := scanRetries(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: retries of %s/%s: %w", k.SagaType, k.Key, translate(err))
	}
	return out, nil
}

// QueryRetries returns one page of the retries q selects (see
// store.RetryRecorder).
func (s *Store) QueryRetries(ctx context.Context, q *store.RetryQuery) ([]store.Retry, error) {
	if q == nil {
		q = &store.RetryQuery{}
	}
	if !representable(q.SagaType, q.AfterID) {
		return nil, fmt.Errorf("pgstore: query retries: %w", &store.RejectedError{Field: "retry query", Err: fmt.Errorf("saga type %.60q or cursor %.60q is not valid UTF-8 without U+0000", q.SagaType, q.AfterID)})
	}
	cursor := q.AfterID != "" || !q.AfterFirstFailedAt.IsZero()
	rows, err := s.pool.Query(ctx, queryRetriesSQL, q.SagaType, q.AfterFirstFailedAt, q.AfterID, cursor, q.PageLimit())
	if err != nil {
		return nil, fmt.Errorf("pgstore: query retries: %w", translate(err))
	}
	out, err := scanRetries(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: query retries: %w", translate(err))
	}
	return out, nil
}

func scanRetries(rows pgx.Rows) ([]store.Retry, error) {
	defer rows.Close()
	var out []store.Retry
	for rows.Next() {
		var r store.Retry
		var meta, body []byte
		var nowAt *time.Time
		if err := rows.Scan(&r.ID, &r.SagaType, &r.Key, &r.MessageID, &r.MessageType, &r.Attempts, &r.Error, &r.FirstFailedAt, &r.LastFailedAt, &r.NextAttemptAt,
			&meta, &body, &nowAt); err != nil {
			return nil, err
		}
		r.FirstFailedAt, r.LastFailedAt, r.NextAttemptAt = r.FirstFailedAt.UTC(), r.LastFailedAt.UTC(), r.NextAttemptAt.UTC()
		if nowAt != nil {
			r.RetryNowAt = nowAt.UTC()
		}
		if err := decodeRetryEnvelope(&r, meta, body); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// queueClearRetries deletes the retries c clears, in the commit's batch.
func queueClearRetries(b *pgx.Batch, c *store.Changes) {
	if ids := representableIDs(c.ClearRetries); len(ids) > 0 {
		b.Queue(clearRetriesSQL, ids)
	}
}

func recordRetryArgs(r *store.Retry) ([]any, error) {
	meta, body, err := encodeRetryEnvelope(r)
	if err != nil {
		return nil, err
	}
	var nowAt *time.Time
	if !r.RetryNowAt.IsZero() {
		nowAt = &r.RetryNowAt
	}
	return []any{r.ID, r.SagaType, r.Key, r.MessageID, r.MessageType, r.Attempts, store.RetryText(r.Error),
		r.FirstFailedAt, r.LastFailedAt, r.NextAttemptAt, meta, body, nowAt}, nil
}

// queueRecordRetries records the retries c records, in the commit's
// batch, after the ones it clears. A retry Validate refuses fails the
// commit.
func queueRecordRetries(b *pgx.Batch, c *store.Changes) error {
	for i := range c.RecordRetries {
		r := &c.RecordRetries[i]
		if err := r.Validate(); err != nil {
			return fmt.Errorf("pgstore: commit: record retry: %w", err)
		}
		args, err := recordRetryArgs(r)
		if err != nil {
			return fmt.Errorf("pgstore: commit: record retry %q: %w", r.ID, err)
		}
		b.Queue(recordRetrySQL, args...)
	}
	return nil
}

var _ store.RetrySweeper = (*Store)(nil)

// SweepRetries deletes at most p.Limit retries whose NextAttemptAt is
// before p.NextAttemptBefore, oldest first (see store.RetrySweeper).
func (s *Store) SweepRetries(ctx context.Context, p *store.StaleRetries) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("pgstore: sweep retries: %w", err)
	}
	if err := s.check("sweep retries"); err != nil {
		return 0, err
	}
	if p.NextAttemptBefore.IsZero() {
		return 0, nil
	}
	tag, err := s.pool.Exec(ctx, sweepRetriesSQL, p.NextAttemptBefore, p.Limit)
	if err != nil {
		return 0, fmt.Errorf("pgstore: sweep retries: %w", translate(err))
	}
	return int(tag.RowsAffected()), nil
}

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The baselines write the rows Idem writes, in Idem's own tables, with
// straight SQL: the instance (insert, or update with a version check), the
// inbox record and the outbox row. They do not consume a queue and write no
// journal; they are what this database can do for this work.

// Per message (baseline a): BEGIN, load (the inbox check rides along), one
// write per table, COMMIT.
const (
	perMsgLoadSQL = `
SELECT EXISTS (SELECT 1 FROM idem_inbox WHERE saga_type = $1 AND key = $2 AND message_id = $3), i.version, i.data
FROM (VALUES (1)) AS one (x)
LEFT JOIN idem_instances i ON i.saga_type = $1 AND i.key = $2`

	perMsgUpdateSQL = `
UPDATE idem_instances SET state = $3, data = $4::jsonb, version = version + 1, updated_at = $5
WHERE saga_type = $1 AND key = $2 AND version = $6`

	perMsgInsertSQL = `
INSERT INTO idem_instances (saga_type, key, state, data, schema_version, version, timers, created_at, updated_at)
VALUES ($1, $2, $3, $4::jsonb, 1, 1, 'null', $5, $5)
ON CONFLICT DO NOTHING`

	perMsgInboxSQL = `
INSERT INTO idem_inbox (saga_type, key, message_id, processed_at) VALUES ($1, $2, $3, $4)`

	perMsgOutboxSQL = `
INSERT INTO idem_outbox (id, envelope, body, created_at) VALUES ($1, $2::jsonb, $3, $4)`
)

// Hand-batched (baseline b): BEGIN, lock the batch's instances in key order
// (so concurrent batches neither deadlock nor lose updates), read the inbox
// under the locks, one multi-row statement per table, COMMIT.
const (
	batchLockSQL = `
SELECT i.key, i.version, i.data FROM idem_instances i
WHERE i.saga_type = $1 AND i.key = ANY($2::text[])
ORDER BY i.key
FOR UPDATE`

	// One index probe per message, whatever the inbox's size: a plain join
	// with unnest is planned as a hash join over a sequential scan of the
	// inbox while the inbox is small enough (tens of thousands of rows with
	// the default random_page_cost), which costs milliseconds per batch.
	batchInboxSQL = `
SELECT i.message_id
FROM unnest($2::text[], $3::text[]) AS u (key, message_id)
CROSS JOIN LATERAL (
  SELECT message_id FROM idem_inbox
  WHERE saga_type = $1 AND key = u.key AND message_id = u.message_id
  LIMIT 1
) AS i`

	batchUpdateSQL = `
UPDATE idem_instances i
SET state = $2, data = u.data::jsonb, version = i.version + 1, updated_at = $3
FROM unnest($4::text[], $5::text[], $6::bigint[]) AS u (key, data, version)
WHERE i.saga_type = $1 AND i.key = u.key AND i.version = u.version`

	batchInsertSQL = `
INSERT INTO idem_instances (saga_type, key, state, data, schema_version, version, timers, created_at, updated_at)
SELECT $1, u.key, $2, u.data::jsonb, 1, 1, 'null', $3, $3
FROM unnest($4::text[], $5::text[]) AS u (key, data)
ORDER BY u.key
ON CONFLICT DO NOTHING`

	batchInboxInsertSQL = `
INSERT INTO idem_inbox (saga_type, key, message_id, processed_at)
SELECT $1, u.key, u.message_id, $2 FROM unnest($3::text[], $4::text[]) AS u (key, message_id)`

	batchOutboxSQL = `
INSERT INTO idem_outbox (id, envelope, body, created_at)
SELECT u.id, u.envelope::jsonb, u.body, $1 FROM unnest($2::text[], $3::text[], $4::bytea[]) AS u (id, envelope, body)`
)

// errRetry marks a transaction that lost a race (a version check, a
// concurrent insert) and must run again.
var errRetry = errors.New("lost a race")

// maxRetries bounds re-runs of one transaction.
const maxRetries = 1000

// baselineCounts are what a baseline run did.
type baselineCounts struct {
	applied, duplicates, retries atomic.Int64
}

// runPerMessage processes the workload one message per transaction with
// clients concurrent clients; each client owns the keys whose index modulo
// clients is its number and takes their messages in stream order, so
// clients do not contend for rows (the engine's lanes partition keys the
// same way).
func runPerMessage(ctx context.Context, pool *pgxpool.Pool, w *Workload, clients int) (*baselineCounts, error) {
	c := &baselineCounts{}
	parts := partition(w, clients)
	var next atomic.Int64
	return c, runClients(ctx, clients, func(ctx context.Context) error {
		for _, d := range parts[next.Add(1)-1] {
			if err := retry(ctx, c, func() error { return perMessage(ctx, pool, c, d) }); err != nil {
				return fmt.Errorf("message %s: %w", d.ID, err)
			}
		}
		return nil
	})
}

// partition splits the stream by key among n clients, keeping order.
func partition(w *Workload, n int) [][]Delivery {
	parts := make([][]Delivery, n)
	for _, d := range w.Deliveries {
		parts[d.Key%n] = append(parts[d.Key%n], d)
	}
	return parts
}

func perMessage(ctx context.Context, pool *pgxpool.Pool, c *baselineCounts, d Delivery) error {
	key := keyName(d.Key)
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var seen bool
	var version *int64
	var data []byte
	if err := tx.QueryRow(ctx, perMsgLoadSQL, SagaType, key, d.ID).Scan(&seen, &version, &data); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if seen {
		if err := tx.Rollback(ctx); err != nil {
			return err
		}
		c.duplicates.Add(1)
		return nil
	}
	var st Counter
	if version != nil {
		if err := json.Unmarshal(data, &st); err != nil {
			return fmt.Errorf("decode counter %s: %w", key, err)
		}
	}
	st.N++
	doc, _ := json.Marshal(st)
	now := time.Now()
	if version != nil {
		ct, err := tx.Exec(ctx, perMsgUpdateSQL, SagaType, key, stateOpen, string(doc), now, *version)
		if err != nil {
			return fmt.Errorf("update: %w", err)
		}
		if ct.RowsAffected() != 1 {
			return errRetry
		}
	} else {
		ct, err := tx.Exec(ctx, perMsgInsertSQL, SagaType, key, stateOpen, string(doc), now)
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		if ct.RowsAffected() != 1 {
			return errRetry
		}
	}
	if _, err := tx.Exec(ctx, perMsgInboxSQL, SagaType, key, d.ID, now); err != nil {
		return fmt.Errorf("insert inbox: %w", err)
	}
	id, meta, body := emission(d.ID, key, st.N, now)
	if _, err := tx.Exec(ctx, perMsgOutboxSQL, id, meta, body, now); err != nil {
		return fmt.Errorf("insert outbox: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	c.applied.Add(1)
	return nil
}

// runBatched processes the workload per transactions of up to per
// consecutive messages of a client's key partition (see runPerMessage).
func runBatched(ctx context.Context, pool *pgxpool.Pool, w *Workload, clients, per int) (*baselineCounts, error) {
	c := &baselineCounts{}
	parts := partition(w, clients)
	var next atomic.Int64
	return c, runClients(ctx, clients, func(ctx context.Context) error {
		for batch := range slices.Chunk(parts[next.Add(1)-1], per) {
			if err := retry(ctx, c, func() error { return batched(ctx, pool, c, batch) }); err != nil {
				return fmt.Errorf("batch from %s: %w", batch[0].ID, err)
			}
		}
		return nil
	})
}

func batched(ctx context.Context, pool *pgxpool.Pool, c *baselineCounts, ds []Delivery) error {
	var keys []string
	seenKey := map[string]bool{}
	msgKeys, msgIDs := make([]string, len(ds)), make([]string, len(ds))
	for i, d := range ds {
		k := keyName(d.Key)
		msgKeys[i], msgIDs[i] = k, d.ID
		if !seenKey[k] {
			seenKey[k] = true
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)

	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	type inst struct {
		version int64 // 0: new
		st      Counter
		touched bool
	}
	insts := map[string]*inst{}
	rows, err := tx.Query(ctx, batchLockSQL, SagaType, keys)
	if err != nil {
		return fmt.Errorf("lock instances: %w", err)
	}
	for rows.Next() {
		var k string
		var in inst
		var data []byte
		if err := rows.Scan(&k, &in.version, &data); err != nil {
			rows.Close()
			return fmt.Errorf("lock instances: %w", err)
		}
		if err := json.Unmarshal(data, &in.st); err != nil {
			rows.Close()
			return fmt.Errorf("decode counter %s: %w", k, err)
		}
		insts[k] = &in
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("lock instances: %w", err)
	}
	seen := map[string]bool{}
	rows, err = tx.Query(ctx, batchInboxSQL, SagaType, msgKeys, msgIDs)
	if err != nil {
		return fmt.Errorf("load inbox: %w", err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("load inbox: %w", err)
		}
		seen[id] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load inbox: %w", err)
	}

	now := time.Now()
	var inboxKeys, inboxIDs, outIDs, outMeta []string
	var outBodies [][]byte
	dups := 0
	for i, d := range ds {
		if seen[d.ID] {
			dups++
			continue
		}
		seen[d.ID] = true
		k := msgKeys[i]
		in := insts[k]
		if in == nil {
			in = &inst{}
			insts[k] = in
		}
		in.st.N++
		in.touched = true
		inboxKeys, inboxIDs = append(inboxKeys, k), append(inboxIDs, d.ID)
		id, meta, body := emission(d.ID, k, in.st.N, now)
		outIDs, outMeta, outBodies = append(outIDs, id), append(outMeta, meta), append(outBodies, body)
	}
	var updKeys, updData, newKeys, newData []string
	var updVersions []int64
	for _, k := range keys {
		in := insts[k]
		if in == nil || !in.touched {
			continue
		}
		doc, _ := json.Marshal(in.st)
		if in.version == 0 {
			newKeys, newData = append(newKeys, k), append(newData, string(doc))
		} else {
			updKeys, updData, updVersions = append(updKeys, k), append(updData, string(doc)), append(updVersions, in.version)
		}
	}
	if len(updKeys) > 0 {
		ct, err := tx.Exec(ctx, batchUpdateSQL, SagaType, stateOpen, now, updKeys, updData, updVersions)
		if err != nil {
			return fmt.Errorf("update instances: %w", err)
		}
		if ct.RowsAffected() != int64(len(updKeys)) {
			return errRetry
		}
	}
	if len(newKeys) > 0 {
		ct, err := tx.Exec(ctx, batchInsertSQL, SagaType, stateOpen, now, newKeys, newData)
		if err != nil {
			return fmt.Errorf("insert instances: %w", err)
		}
		if ct.RowsAffected() != int64(len(newKeys)) {
			return errRetry
		}
	}
	if len(inboxIDs) > 0 {
		if _, err := tx.Exec(ctx, batchInboxInsertSQL, SagaType, now, inboxKeys, inboxIDs); err != nil {
			return fmt.Errorf("insert inbox: %w", err)
		}
		if _, err := tx.Exec(ctx, batchOutboxSQL, now, outIDs, outMeta, outBodies); err != nil {
			return fmt.Errorf("insert outbox: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	c.applied.Add(int64(len(inboxIDs)))
	c.duplicates.Add(int64(dups))
	return nil
}

// retry runs fn again while it loses races: a failed version check or
// insert, a unique violation on the inbox (a concurrent copy of the same
// message won), a serialization failure or a deadlock.
func retry(ctx context.Context, c *baselineCounts, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !lostRace(err) || attempt >= maxRetries || ctx.Err() != nil {
			return err
		}
		c.retries.Add(1)
	}
}

func lostRace(err error) bool {
	if errors.Is(err, errRetry) {
		return true
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "40001" || pe.Code == "40P01")
}

// runClients runs fn on n goroutines and returns the first error; the
// others are cancelled.
func runClients(ctx context.Context, n int, fn func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := fn(ctx); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

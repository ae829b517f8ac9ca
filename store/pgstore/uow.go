package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// unitOfWork is one pipelined transaction on one pooled connection: BEGIN
// goes out with the first Load, COMMIT with the writes.
type unitOfWork struct {
	s       *Store
	conn    *pgxpool.Conn
	begun   bool
	done    bool
	consume []transport.Delivery
	enqueue []transport.Envelope
	advance []store.ScheduleAdvance // see schedule.go
	// claim is what this unit of work claimed from the queue (see
	// claim.go); nil when it claimed nothing, and every use checks.
	claim *txClaim
}

// Begin acquires a connection; the transaction starts with the first Load or
// with Commit, in the same round trip.
func (s *Store) Begin(ctx context.Context) (store.UnitOfWork, error) {
	if err := s.check("begin"); err != nil {
		return nil, err
	}
	s.watchStalled()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: begin: %w", translate(err))
	}
	return &unitOfWork{s: s, conn: conn}, nil
}

const beginSQL = `BEGIN ISOLATION LEVEL READ COMMITTED`

// The loads are written as one index probe per requested row (LATERAL …
// LIMIT 1): a plain join lets the planner choose a hash join that scans the
// whole inbox once it has grown, which was ten times slower per batch.
const loadInstancesSQL = `
SELECT i.saga_type, i.key, i.state, i.data, i.schema_version, i.version, i.timers, i.created_at, i.updated_at, i.finished_at, i.attributes
FROM unnest($1::text[], $2::text[]) AS u(saga_type, key)
CROSS JOIN LATERAL (
  SELECT * FROM idem_instances i WHERE i.saga_type = u.saga_type AND i.key = u.key LIMIT 1
) i`

const loadInboxSQL = `
SELECT u.saga_type, u.key, u.message_id
FROM unnest($1::text[], $2::text[], $3::text[]) AS u(saga_type, key, message_id)
CROSS JOIN LATERAL (
  SELECT 1 FROM idem_inbox i
  WHERE i.saga_type = u.saga_type AND i.key = u.key AND i.message_id = u.message_id
  LIMIT 1
) hit`

func (u *unitOfWork) live(op string) error {
	if u.done {
		return fmt.Errorf("pgstore: %s: unit of work already finished", op)
	}
	return u.s.check(op)
}

// Load reads instances and inbox records in one round trip (with BEGIN).
// They are two statements, each with its own snapshot (READ COMMITTED),
// and the instances go first: a commit in between can only make an inbox
// record newer than its instance (which the commit's version check
// catches), never an instance newer than its inbox record (which would
// apply a message twice). See store.LoadResult.
func (u *unitOfWork) Load(ctx context.Context, p *store.LoadParams) (*store.LoadResult, error) {
	if err := u.live("load"); err != nil {
		return nil, err
	}
	res := &store.LoadResult{Instances: map[store.Key]*store.Instance{}, Seen: map[store.InboxKey]bool{}}
	b := &pgx.Batch{}
	if !u.begun {
		b.Queue(beginSQL)
		u.begun = true
	}
	if len(p.Keys) > 0 {
		types, keys := make([]string, len(p.Keys)), make([]string, len(p.Keys))
		for i, k := range p.Keys {
			types[i], keys[i] = k.SagaType, k.Key
		}
		b.Queue(loadInstancesSQL, types, keys).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				in, err := scanInstance(rows)
				if err != nil {
					return err
				}
				res.Instances[store.Key{SagaType: in.SagaType, Key: in.Key}] = in
			}
			return rows.Err()
		})
	}
	if len(p.Inbox) > 0 {
		types, keys, ids := make([]string, len(p.Inbox)), make([]string, len(p.Inbox)), make([]string, len(p.Inbox))
		for i, k := range p.Inbox {
			types[i], keys[i], ids[i] = k.SagaType, k.Key, k.MessageID
		}
		b.Queue(loadInboxSQL, types, keys, ids).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k store.InboxKey
				if err := rows.Scan(&k.SagaType, &k.Key, &k.MessageID); err != nil {
					return err
				}
				res.Seen[k] = true
			}
			return rows.Err()
		})
	}
	queueLoadTokens(b, p.Tokens, res)
	if b.Len() == 0 {
		return res, nil
	}
	if err := u.conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("pgstore: load %d instances: %w", len(p.Keys), translate(err))
	}
	return res, nil
}

func scanInstance(rows pgx.Rows) (*store.Instance, error) {
	var in store.Instance
	var timers []byte
	var finished pgtype.Timestamptz
	var attrs []byte
	if err := rows.Scan(&in.SagaType, &in.Key, &in.State, &in.Data, &in.SchemaVersion, &in.Version, &timers, &in.CreatedAt, &in.UpdatedAt, &finished, &attrs); err != nil {
		return nil, err
	}
	var err error
	if in.Attributes, err = sqlq.DecodeAttributes(attrs); err != nil {
		return nil, fmt.Errorf("%s/%s: %w", in.SagaType, in.Key, err)
	}
	if len(timers) > 0 && string(timers) != "null" {
		if err := json.Unmarshal(timers, &in.Timers); err != nil {
			return nil, fmt.Errorf("decode timers of %s/%s: %w", in.SagaType, in.Key, err)
		}
	}
	if finished.Valid {
		in.FinishedAt = finished.Time
	}
	normalizeTimes(&in.CreatedAt, &in.UpdatedAt, &in.FinishedAt)
	return &in, nil
}

func normalizeTimes(ts ...*time.Time) {
	for _, t := range ts {
		if !t.IsZero() {
			*t = t.UTC()
		}
	}
}

const insertInstancesSQL = `
INSERT INTO idem_instances (saga_type, key, state, data, schema_version, version, timers, created_at, updated_at, finished_at, attributes)
SELECT u.saga_type, u.key, u.state, u.data::jsonb, u.schema_version, u.version, u.timers::jsonb, u.created_at, u.updated_at, u.finished_at, u.attributes::jsonb
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::bigint[], $7::text[], $8::timestamptz[], $9::timestamptz[], $10::timestamptz[], $11::text[])
  AS u(saga_type, key, state, data, schema_version, version, timers, created_at, updated_at, finished_at, attributes)`

const updateInstancesSQL = `
WITH changed AS (
  UPDATE idem_instances i
  SET state = u.state, data = u.data::jsonb, schema_version = u.schema_version, version = i.version + 1,
      timers = u.timers::jsonb, updated_at = u.updated_at, finished_at = u.finished_at, attributes = u.attributes::jsonb
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::bigint[], $7::text[], $8::timestamptz[], $9::timestamptz[], $10::timestamptz[], $11::text[])
    AS u(saga_type, key, state, data, schema_version, version, timers, created_at, updated_at, finished_at, attributes)
  WHERE i.saga_type = u.saga_type AND i.key = u.key AND i.version = u.version
  RETURNING 1
)
SELECT idem_expect((SELECT count(*) FROM changed), $12, 'update')`

const insertInboxSQL = `
INSERT INTO idem_inbox (saga_type, key, message_id, processed_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
ON CONFLICT DO NOTHING`

const insertOutboxSQL = `
INSERT INTO idem_outbox (id, envelope, body, created_at)
SELECT u.id, u.envelope::jsonb, u.body, u.created_at
FROM unnest($1::text[], $2::text[], $3::bytea[], $4::timestamptz[]) WITH ORDINALITY AS u(id, envelope, body, created_at, ord)
ORDER BY u.ord
ON CONFLICT (id) DO NOTHING`

const cancelTimersSQL = `
DELETE FROM idem_timers t
USING unnest($1::text[], $2::text[], $3::text[]) AS u(saga_type, key, name)
WHERE t.saga_type = u.saga_type AND t.key = u.key AND t.name = u.name`

const upsertTimersSQL = `
INSERT INTO idem_timers (saga_type, key, name, due_at, envelope, body)
SELECT u.saga_type, u.key, u.name, u.due_at, u.envelope::jsonb, u.body
FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::bytea[]) AS u(saga_type, key, name, due_at, envelope, body)
ON CONFLICT (saga_type, key, name) DO UPDATE
SET due_at = excluded.due_at, envelope = excluded.envelope, body = excluded.body, lease_until = NULL`

const insertJournalSQL = `
INSERT INTO idem_journal (saga_type, key, raw_key, message_id, event_type, from_state, to_state, version, at, payload, diff, state, detail)
SELECT u.saga_type, u.key, u.raw_key, u.message_id, u.event_type, u.from_state, u.to_state, u.version, u.at, u.payload, u.diff, u.state, NULLIF(u.detail, '')
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[], $9::timestamptz[],
            $10::bytea[], $11::bytea[], $12::bytea[], $13::text[]) WITH ORDINALITY
  AS u(saga_type, key, raw_key, message_id, event_type, from_state, to_state, version, at, payload, diff, state, detail, ord)
ORDER BY u.ord`

const upsertDeadLettersSQL = `
INSERT INTO idem_dead_letters (id, envelope, body, reason, error, saga_type, key, attempts, first_failed_at, last_failed_at, fingerprint)
SELECT u.id, u.envelope::json, u.body, u.reason, u.error, u.saga_type, u.key, u.attempts, u.first_failed_at, u.last_failed_at, u.fingerprint
FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int[], $9::timestamptz[], $10::timestamptz[], $11::text[])
  AS u(id, envelope, body, reason, error, saga_type, key, attempts, first_failed_at, last_failed_at, fingerprint)
ON CONFLICT (id) DO UPDATE
SET envelope = excluded.envelope, body = excluded.body, reason = excluded.reason, error = excluded.error,
    saga_type = excluded.saga_type, key = excluded.key, attempts = excluded.attempts,
    first_failed_at = least(idem_dead_letters.first_failed_at, excluded.first_failed_at), last_failed_at = excluded.last_failed_at,
    fingerprint = excluded.fingerprint, archived_at = NULL`

// consumeSQL deletes the rows of consumed deliveries, and fails with
// ErrLeaseLost (ID002) when one is missing: handed out again, or held
// (sqlq.HeldPrefix) and past its lease by the database's clock at the
// commit (sqlq.Lost), whatever the transaction's start.
const consumeSQL = `
WITH gone AS (
  DELETE FROM idem_queue q
  USING unnest($1::bigint[], $2::text[]) AS u(seq, token)
  WHERE q.seq = u.seq AND q.token = u.token AND (q.visible_at > clock_timestamp() OR q.token NOT LIKE 'held%')
  RETURNING 1
)
SELECT idem_expect((SELECT count(*) FROM gone), $3, 'lease')`

// enqueueSQL stores each message's partition: PostgreSQL's hashtext of
// canon.PartitionKey (the canonical saga key, computed in Go), which the
// RabbitMQ transport reproduces, so that every spelling of one key shares
// a partition.
const enqueueSQL = `
INSERT INTO idem_queue (id, envelope, body, visible_at, part)
SELECT u.id, u.envelope::jsonb, u.body, now(), hashtext(u.pkey) & 2147483647
FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[]) WITH ORDINALITY AS u(id, envelope, body, pkey, ord)
ORDER BY u.ord`

// notifySQL wakes the receivers of schema $1 (Config.Schema as given:
// current_schema() would be the case-folded name under a wrong search path).
const notifySQL = `SELECT pg_notify('idem_queue', $1::text)`

// Consume settles deliveries of this store's queue inside the unit of work.
func (u *unitOfWork) Consume(_ context.Context, ds []transport.Delivery) error {
	if err := u.live("consume"); err != nil {
		return err
	}
	if u.claim != nil {
		ds = u.claim.consume(ds)
	}
	u.consume = append(u.consume, ds...)
	return nil
}

// Enqueue adds messages to this store's queue inside the unit of work.
func (u *unitOfWork) Enqueue(_ context.Context, msgs []transport.Envelope) error {
	if err := u.live("enqueue"); err != nil {
		return err
	}
	u.enqueue = append(u.enqueue, msgs...)
	return nil
}

// Commit sends every write and COMMIT in one pipelined round trip.
func (u *unitOfWork) Commit(ctx context.Context, c *store.Changes) error {
	if err := u.live("commit"); err != nil {
		return err
	}
	if c == nil {
		c = &store.Changes{}
	}
	if err := sqlq.CheckWrites(c); err != nil {
		return fmt.Errorf("pgstore: commit: %w", err)
	}
	if err := checkStates(c); err != nil {
		return err
	}
	if u.claim != nil {
		if err := u.claim.settled(); err != nil {
			return err
		}
	}
	b, err := u.commitBatch(lastWins(c))
	if err != nil {
		return err
	}
	err = u.conn.SendBatch(ctx, b).Close()
	if len(c.DeadLetters) > 0 || c.SettleReplays != nil || c.SettleDuplicates != nil {
		// Even when the commit failed: its outcome may be unknown, and a
		// dead-letter write that did commit must show at once.
		defer u.s.groups.drop()
	}
	if err != nil && u.claim != nil && u.claim.keeps(ctx, u, err) {
		return fmt.Errorf("pgstore: commit: %w", translate(err))
	}
	u.finish(ctx, err != nil)
	if err != nil {
		return fmt.Errorf("pgstore: commit: %w", translateCommit(err))
	}
	if u.wakes(c) {
		u.s.notifySoon()
	}
	return nil
}

// wakes reports whether the unit of work gives receivers something new:
// messages in the queue (its own, or claimed ones it returns), or
// flow-control holds released, which may let a waiting message in.
func (u *unitOfWork) wakes(c *store.Changes) bool {
	return len(u.enqueue) > 0 || (u.claim != nil && len(u.claim.returns) > 0) ||
		len(c.ReleaseHolds) > 0 || len(sqlq.Holders(u.consume)) > 0
}

// commitBatch is the pipeline of Commit: BEGIN unless a Load sent it, one
// statement per kind of change in c and in u (none for an empty kind),
// then COMMIT.
func (u *unitOfWork) commitBatch(c *store.Changes) (*pgx.Batch, error) {
	b := &pgx.Batch{}
	if !u.begun {
		b.Queue(beginSQL)
		u.begun = true
	}
	b.Queue(commitLockTimeoutSQL)
	if err := queueInstances(b, insertInstancesSQL, c.Inserts, false); err != nil {
		return nil, err
	}
	if err := queueInstances(b, updateInstancesSQL, c.Updates, true); err != nil {
		return nil, err
	}
	queueInbox(b, c.Inbox)
	b.Queue(commitLockWaitSQL)
	if err := queueOutbox(b, c.Outbox); err != nil {
		return nil, err
	}
	queueCancelTimers(b, c.CancelTimers)
	if err := queueTimers(b, c.Timers); err != nil {
		return nil, err
	}
	if err := queueJournal(b, c.Journal); err != nil {
		return nil, err
	}
	if err := queueDeadLetters(b, c.DeadLetters); err != nil {
		return nil, err
	}
	queueSettleReplays(b, c.SettleReplays)
	queueSettleReplays(b, c.SettleDuplicates)
	queueClearRetries(b, c)
	if err := queueRecordRetries(b, c); err != nil {
		return nil, err
	}
	if err := queueConsume(b, u.consume); err != nil {
		return nil, err
	}
	queueReleaseHolds(b, append(c.ReleaseHolds[:len(c.ReleaseHolds):len(c.ReleaseHolds)], sqlq.Holders(u.consume)...))
	if err := queueEnqueue(b, u.enqueue); err != nil {
		return nil, err
	}
	u.queueAdvances(b)
	queueTokenWrites(b, c)
	if u.claim != nil {
		u.claim.queueRequeue(b, u.claim.returns, sqlq.RetiredPrefix+u.claim.token) // returned: settled, as by a Nack
	}
	b.Queue(`COMMIT`)
	return b, nil
}

func queueInbox(b *pgx.Batch, inbox []store.InboxEntry) {
	n := len(inbox)
	if n == 0 {
		return
	}
	types, keys, ids, at := make([]string, n), make([]string, n), make([]string, n), make([]time.Time, n)
	for i, e := range inbox {
		types[i], keys[i], ids[i], at[i] = e.SagaType, e.Key, e.MessageID, e.ProcessedAt
	}
	b.Queue(insertInboxSQL, types, keys, ids, at)
}

func queueOutbox(b *pgx.Batch, outbox []store.OutboxMessage) error {
	n := len(outbox)
	if n == 0 {
		return nil
	}
	ids, envs, bodies, at := make([]string, n), make([]string, n), make([][]byte, n), make([]time.Time, n)
	for i, m := range outbox {
		meta, body, err := sqlq.EncodeEnvelope(m.Envelope)
		if err != nil {
			return err
		}
		ids[i], envs[i], bodies[i], at[i] = m.Envelope.ID, meta, body, m.CreatedAt
	}
	b.Queue(insertOutboxSQL, ids, envs, bodies, at)
	return nil
}

func queueCancelTimers(b *pgx.Batch, cancels []store.TimerKey) {
	n := len(cancels)
	if n == 0 {
		return
	}
	types, keys, names := make([]string, n), make([]string, n), make([]string, n)
	for i, t := range cancels {
		types[i], keys[i], names[i] = t.SagaType, t.Key, t.Name
	}
	b.Queue(cancelTimersSQL, types, keys, names)
}

func queueTimers(b *pgx.Batch, timers []store.Timer) error {
	n := len(timers)
	if n == 0 {
		return nil
	}
	types, keys, names, due, envs, bodies := make([]string, n), make([]string, n), make([]string, n), make([]time.Time, n), make([]string, n), make([][]byte, n)
	for i, t := range timers {
		meta, body, err := sqlq.EncodeEnvelope(t.Envelope)
		if err != nil {
			return err
		}
		types[i], keys[i], names[i], due[i], envs[i], bodies[i] = t.SagaType, t.Key, t.Name, t.DueAt, meta, body
	}
	b.Queue(upsertTimersSQL, types, keys, names, due, envs, bodies)
	return nil
}

func queueJournal(b *pgx.Batch, journal []store.JournalEntry) error {
	n := len(journal)
	if n == 0 {
		return nil
	}
	det, err := journalDetails(journal)
	if err != nil {
		return err
	}
	cols := [7][]string{}
	for i := range cols {
		cols[i] = make([]string, n)
	}
	versions, at := make([]int64, n), make([]time.Time, n)
	for i, j := range journal {
		cols[0][i], cols[1][i], cols[2][i], cols[3][i], cols[4][i], cols[5][i], cols[6][i] = j.SagaType, j.Key, j.RawKey, j.MessageID, j.EventType, j.FromState, j.ToState
		versions[i], at[i] = j.Version, j.At
	}
	b.Queue(insertJournalSQL, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], versions, at, det.payloads, det.diffs, det.states, det.details)
	return nil
}

func queueDeadLetters(b *pgx.Batch, dls []store.DeadLetter) error {
	n := len(dls)
	if n == 0 {
		return nil
	}
	ids, envs, bodies, reasons, errs, types, keys := make([]string, n), make([]string, n), make([][]byte, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempts, first, last := make([]int32, n), make([]time.Time, n), make([]time.Time, n)
	fps := make([]string, n)
	for i, d := range dls {
		meta, body, err := sqlq.EncodeEnvelope(d.Envelope)
		if err != nil {
			return err
		}
		ids[i], envs[i], bodies[i], reasons[i], errs[i], types[i], keys[i] = d.ID, meta, body, d.Reason, d.Error, d.SagaType, d.Key
		attempts[i], first[i], last[i] = int32(d.Attempts), d.FirstFailedAt, d.LastFailedAt
		fps[i] = store.Fingerprint(d.Reason, d.Error)
	}
	b.Queue(upsertDeadLettersSQL, ids, envs, bodies, reasons, errs, types, keys, attempts, first, last, fps)
	return nil
}

func queueSettleReplays(b *pgx.Batch, p *store.SettleReplaysParams) {
	if p == nil {
		return
	}
	if ids := representableIDs(p.IDs); len(ids) > 0 {
		b.Queue(settleReplaysSQL, ids, string(p.Outcome), p.At, storableText(p.Error))
	}
}

// queueConsume deletes the rows of deliveries leased from this store's
// queue; a token from elsewhere is refused.
func queueConsume(b *pgx.Batch, ds []transport.Delivery) error {
	n := len(ds)
	if n == 0 {
		return nil
	}
	seqs, tokens := make([]int64, n), make([]string, n)
	for i, d := range ds {
		seq, tok, ok := sqlq.ParseToken(d.Token)
		if !ok {
			return fmt.Errorf("pgstore: consume %s: delivery token %q is not from this store", d.Envelope.ID, d.Token)
		}
		seqs[i], tokens[i] = seq, tok
	}
	b.Queue(consumeSQL, seqs, tokens, int64(n))
	return nil
}

// queueEnqueue queues the insert of msgs into this store's queue: one
// statement, none when msgs is empty.
func queueEnqueue(b *pgx.Batch, msgs []transport.Envelope) error {
	n := len(msgs)
	if n == 0 {
		return nil
	}
	ids, envs, bodies, pkeys := make([]string, n), make([]string, n), make([][]byte, n), make([]string, n)
	for i, m := range msgs {
		meta, body, err := sqlq.EncodeEnvelope(m)
		if err != nil {
			return err
		}
		ids[i], envs[i], bodies[i], pkeys[i] = m.ID, meta, body, partitionKey(&m)
	}
	b.Queue(enqueueSQL, ids, envs, bodies, pkeys)
	return nil
}

func queueInstances(b *pgx.Batch, sql string, ins []*store.Instance, guarded bool) error {
	n := len(ins)
	if n == 0 {
		return nil
	}
	types, keys, states, data, timers := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	schema, versions := make([]int32, n), make([]int64, n)
	created, updated, finished := make([]time.Time, n), make([]time.Time, n), make([]pgtype.Timestamptz, n)
	attrs := make([]*string, n)
	for i, in := range ins {
		a, err := sqlq.AttributesJSON(in.Attributes)
		if err != nil {
			return fmt.Errorf("pgstore: %s/%s: %w", in.SagaType, in.Key, err)
		}
		attrs[i] = a
		types[i], keys[i], states[i], schema[i], versions[i] = in.SagaType, in.Key, in.State, int32(in.SchemaVersion), in.Version
		data[i] = string(in.Data)
		if len(in.Data) == 0 {
			data[i] = "null"
		}
		t, err := json.Marshal(in.Timers)
		if err != nil {
			return fmt.Errorf("pgstore: encode timers of %s/%s: %w", in.SagaType, in.Key, err)
		}
		timers[i] = string(t)
		created[i], updated[i] = in.CreatedAt, in.UpdatedAt
		finished[i] = pgtype.Timestamptz{Time: in.FinishedAt, Valid: !in.FinishedAt.IsZero()}
	}
	if guarded {
		b.Queue(sql, types, keys, states, data, schema, versions, timers, created, updated, finished, attrs, int64(n))
	} else {
		b.Queue(sql, types, keys, states, data, schema, versions, timers, created, updated, finished, attrs)
	}
	return nil
}

// finish ends the unit of work; after a failed pipeline the transaction is
// aborted and must be rolled back before the connection is reused.
func (u *unitOfWork) finish(ctx context.Context, rollback bool) {
	if u.done {
		return
	}
	u.done = true
	if rollback && u.begun {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = u.conn.Exec(rctx, `ROLLBACK`)
		cancel()
	}
	u.conn.Release() // pgxpool destroys a connection left inside a transaction
}

// Rollback discards the unit of work; after Commit it does nothing.
func (u *unitOfWork) Rollback(ctx context.Context) error {
	u.finish(ctx, true)
	return nil
}

// commitLockTimeoutSQL bounds how long a commit's writes of sagas and
// inbox records wait for a lock that another transaction holds (see
// translateCommit); commitLockWaitSQL restores, for the writes that
// follow, the bound the role, database or server sets (not one a pool's
// AfterConnect set with a session SET): the queue rows a commit consumes
// may be held for a moment by this engine's own lease renewal, which is
// worth waiting for. The 5 ms also cut short a wait for a table lock (an
// ALTER TABLE of a migration, autovacuum truncating a table): that commit
// fails as a conflict, and the engine applies its unit of work again.
const (
	commitLockTimeoutSQL = `SET LOCAL lock_timeout = 5`
	commitLockWaitSQL    = `SET LOCAL lock_timeout TO DEFAULT`
)

// translateCommit is translate for a commit's error: a row lock the commit
// could not get within commitLockTimeoutSQL is a conflict. The lock's
// holder is another unit of work writing the same saga or inbox record
// (another replica's, as one engine's own units of work never write one
// saga at once): once it commits, the version or unique check fails anyway,
// so waiting for it only queued replicas behind one another (and behind
// deadlock detection, when two units lock their rows in other orders).
func translateCommit(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "55P03" { // lock_not_available
		return fmt.Errorf("%w: %s", store.ErrConflict, pe.Message)
	}
	return translate(err)
}

// translate maps PostgreSQL errors onto the contract's sentinels.
func translate(err error) error {
	if errors.Is(err, pgconn.ErrReadOnlyConnection) {
		// target_session_attrs=read-write found no host that accepts
		// writes: the failover has not ended (failover.go).
		return fmt.Errorf("%w: %v", store.ErrReadOnly, redact(err))
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "23505", "40001", "40P01", "ID001": // unique violation, serialization failure, deadlock, guarded update
			return fmt.Errorf("%w: %s", store.ErrConflict, pe.Message)
		case "ID002":
			return fmt.Errorf("%w: %s", transport.ErrLeaseLost, pe.Message)
		case "25006": // read_only_sql_transaction: not (or no longer) the primary
			return fmt.Errorf("%w: %s", store.ErrReadOnly, pe.Message)
		}
		if strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "54") {
			// Data exception or program limit: the same data fails again.
			return &store.RejectedError{Field: "data", Err: redact(err)}
		}
	}
	return redact(err)
}

// checkStates refuses, before anything is sent, a state document jsonb
// cannot store: a string holding U+0000 (SQLSTATE 22P05 otherwise, with
// no word of which saga).
func checkStates(c *store.Changes) error {
	for _, ins := range [][]*store.Instance{c.Inserts, c.Updates} {
		for _, in := range ins {
			if jsonHasNUL(in.Data) {
				return &store.RejectedError{Field: "state", Err: fmt.Errorf(
					"pgstore: the state of saga %s/%q holds a string with U+0000, which PostgreSQL jsonb cannot store", in.SagaType, in.Key)}
			}
		}
	}
	return nil
}

// jsonHasNUL reports whether the JSON text b holds the escape \u0000 (in
// valid JSON a backslash only occurs inside strings, as an escape).
func jsonHasNUL(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		if b[i+1] == 'u' && i+5 < len(b) && string(b[i+2:i+6]) == "0000" {
			return true
		}
		i++ // skip the escaped character
	}
	return false
}

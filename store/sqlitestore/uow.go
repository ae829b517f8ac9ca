package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// unitOfWork holds no connection and no lock between calls: Load reads the
// committed state on a reader connection, and Commit hands every write to
// the Store's writer, where versions are checked inside the write
// transaction.
type unitOfWork struct {
	s       *Store
	done    bool
	consume []transport.Delivery
	enqueue []transport.Envelope
	held    *held                   // the writer, kept for the handlers' statements
	broken  error                   // SQLite ended the held transaction
	advance []store.ScheduleAdvance // see schedule.go
}

// Begin starts a unit of work. It never waits.
func (s *Store) Begin(context.Context) (store.UnitOfWork, error) {
	if err := s.check("begin"); err != nil {
		return nil, err
	}
	return &unitOfWork{s: s}, nil
}

func (u *unitOfWork) live(op string) error {
	if u.done {
		return fmt.Errorf("sqlitestore: %s: unit of work already finished", op)
	}
	return u.s.check(op)
}

const instanceCols = `saga_type, key, state, data, schema_version, version, timers, created_at, updated_at, finished_at, attributes`

const loadInstanceSQL = `SELECT ` + instanceCols + ` FROM idem_instances WHERE saga_type = ?1 AND key = ?2`

const loadInboxSQL = `SELECT 1 FROM idem_inbox WHERE saga_type = ?1 AND key = ?2 AND message_id = ?3`

// Load reads instances and inbox records in one read transaction, so that
// both come from one snapshot of the committed state. It never waits for a
// writer (WAL mode).
func (u *unitOfWork) Load(ctx context.Context, p *store.LoadParams) (*store.LoadResult, error) {
	if err := u.live("load"); err != nil {
		return nil, err
	}
	res := &store.LoadResult{Instances: map[store.Key]*store.Instance{}, Seen: map[store.InboxKey]bool{}}
	if p == nil || len(p.Keys)+len(p.Inbox)+len(p.Tokens) == 0 {
		return res, nil
	}
	tx, err := u.s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: load: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a read transaction has nothing to lose
	if len(p.Keys) > 0 {
		st := tx.StmtContext(ctx, u.s.loadInstance)
		for _, k := range p.Keys {
			if _, ok := res.Instances[k]; ok {
				continue
			}
			in, err := scanInstance(st.QueryRowContext(ctx, k.SagaType, k.Key))
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("sqlitestore: load instance %s/%s: %w", k.SagaType, k.Key, err)
			}
			res.Instances[k] = in
		}
	}
	if len(p.Inbox) > 0 {
		st := tx.StmtContext(ctx, u.s.loadInbox)
		for _, k := range p.Inbox {
			if res.Seen[k] {
				continue
			}
			var one int
			err := st.QueryRowContext(ctx, k.SagaType, k.Key, k.MessageID).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("sqlitestore: load inbox %s/%s/%s: %w", k.SagaType, k.Key, k.MessageID, err)
			}
			res.Seen[k] = true
		}
	}
	if res.Tokens, err = loadTokens(ctx, tx, p.Tokens); err != nil {
		return nil, err
	}
	return res, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanInstance(row scanner) (*store.Instance, error) {
	var in store.Instance
	var timers sql.NullString
	var created, updated int64
	var finished sql.NullInt64
	var attrs []byte
	if err := row.Scan(&in.SagaType, &in.Key, &in.State, &in.Data, &in.SchemaVersion, &in.Version, &timers, &created, &updated, &finished, &attrs); err != nil {
		return nil, err
	}
	var err error
	if in.Attributes, err = sqlq.DecodeAttributes(attrs); err != nil {
		return nil, fmt.Errorf("%s/%s: %w", in.SagaType, in.Key, err)
	}
	if timers.Valid && timers.String != "null" {
		if err := json.Unmarshal([]byte(timers.String), &in.Timers); err != nil {
			return nil, fmt.Errorf("decode timers of %s/%s: %w", in.SagaType, in.Key, err)
		}
	}
	if in.Data == nil {
		in.Data = []byte{}
	}
	in.CreatedAt, in.UpdatedAt, in.FinishedAt = fromMicros(created), fromMicros(updated), fromNullMicros(finished)
	return &in, nil
}

// Consume settles deliveries of this store's queue inside the unit of work.
func (u *unitOfWork) Consume(_ context.Context, ds []transport.Delivery) error {
	if err := u.live("consume"); err != nil {
		return err
	}
	u.consume = append(u.consume, ds...)
	return nil
}

// Enqueue adds messages to this store's queue inside the unit of work.
func (u *unitOfWork) Enqueue(_ context.Context, msgs []transport.Envelope) error {
	if err := u.live("enqueue"); err != nil {
		return err
	}
	for _, m := range msgs {
		u.enqueue = append(u.enqueue, m.Clone())
	}
	return nil
}

const insertInstanceSQL = `
INSERT INTO idem_instances (` + instanceCols + `)
VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?7, ?8, ?9, ?10)`

const updateInstanceSQL = `
UPDATE idem_instances
SET state = ?3, data = ?4, schema_version = ?5, version = version + 1, timers = ?6, updated_at = ?8, finished_at = ?9, attributes = ?10
WHERE saga_type = ?1 AND key = ?2 AND version = ?11`

const insertInboxSQL = `
INSERT INTO idem_inbox (saga_type, key, message_id, processed_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT DO NOTHING`

const insertOutboxSQL = `
INSERT INTO idem_outbox (id, envelope, body, created_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (id) DO NOTHING`

const cancelTimerSQL = `DELETE FROM idem_timers WHERE saga_type = ?1 AND key = ?2 AND name = ?3`

const upsertTimerSQL = `
INSERT INTO idem_timers (saga_type, key, name, due_at, envelope_id, envelope, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (saga_type, key, name) DO UPDATE
SET due_at = excluded.due_at, envelope_id = excluded.envelope_id, envelope = excluded.envelope, body = excluded.body, lease_until = NULL`

const insertJournalSQL = `
INSERT INTO idem_journal (saga_type, key, raw_key, message_id, event_type, from_state, to_state, version, at, payload, diff, detail, state)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)`

const upsertDeadLetterSQL = `
INSERT INTO idem_dead_letters (id, envelope, body, reason, error, saga_type, key, attempts, first_failed_at, last_failed_at, fingerprint)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
ON CONFLICT (id) DO UPDATE
SET envelope = excluded.envelope, body = excluded.body, reason = excluded.reason, error = excluded.error,
    saga_type = excluded.saga_type, key = excluded.key, attempts = excluded.attempts,
    first_failed_at = min(idem_dead_letters.first_failed_at, excluded.first_failed_at), last_failed_at = excluded.last_failed_at,
    fingerprint = excluded.fingerprint, archived_at = NULL`

// consumeSQL deletes the queue row ?1 claimed with token ?2, unless the
// claim is lost (sqlq.Lost): a held claim (sqlq.HeldPrefix) whose lease
// has passed at ?3 (clockNow) deletes nothing.
const consumeSQL = `DELETE FROM idem_queue WHERE seq = ?1 AND token = ?2 AND (visible_at > ?3 OR substr(token, 1, 4) <> 'held')`

const enqueueSQL = `INSERT INTO idem_queue (id, envelope, body, visible_at) VALUES (?1, ?2, ?3, ?4)`

// op is one statement of a commit, with what its outcome means.
type op struct {
	sql  string
	args []any
	// check interprets the statement's error and changed-row count; nil
	// accepts any count and returns the error as it is.
	check func(n int64, err error) error
}

// Commit writes every change in one request to the Store's writer: inside
// its transaction, an insert of an existing instance or an update of a
// version that is no longer stored fails with store.ErrConflict, a consumed
// delivery whose lease was lost fails with transport.ErrLeaseLost, and
// either rolls back everything of this unit of work.
func (u *unitOfWork) Commit(ctx context.Context, c *store.Changes) error {
	if err := u.live("commit"); err != nil {
		return err
	}
	u.done = true
	if c == nil {
		c = &store.Changes{}
	}
	if err := sqlq.CheckWrites(c); err != nil {
		return fmt.Errorf("sqlitestore: commit: %w", err)
	}
	ops, err := u.plan(c)
	if err != nil {
		return err
	}
	if u.held != nil && u.held.w != nil {
		if err := u.finishHeld(heldEnd{ops: ops, err: u.broken}); err != nil {
			return fmt.Errorf("sqlitestore: commit: %w", err)
		}
		return nil
	}
	if len(ops) == 0 {
		return nil
	}
	var opts writeOpts
	if len(u.enqueue) > 0 || len(c.ReleaseHolds) > 0 || len(sqlq.Holders(u.consume)) > 0 {
		opts = wakeConsumers // a release may let a waiting message in
	}
	err = u.s.write(ctx, "commit", opts, func(w *writer) error { return runOps(w, ops) })
	if err != nil {
		return fmt.Errorf("sqlitestore: commit: %w", err)
	}
	return nil
}

// plan encodes every change into statements, before the writer is asked,
// so that the write transaction only executes.
func (u *unitOfWork) plan(c *store.Changes) ([]op, error) {
	var ops []op
	for _, in := range c.Inserts {
		args, err := instanceArgs(in)
		if err != nil {
			return nil, err
		}
		typ, key := in.SagaType, in.Key
		ops = append(ops, op{sql: insertInstanceSQL, args: args, check: func(_ int64, err error) error {
			if isUniqueViolation(err) {
				return fmt.Errorf("%w: insert %s/%s: the instance exists", store.ErrConflict, typ, key)
			}
			return err
		}})
	}
	for _, in := range c.Updates {
		args, err := instanceArgs(in)
		if err != nil {
			return nil, err
		}
		typ, key, v := in.SagaType, in.Key, in.Version
		ops = append(ops, op{sql: updateInstanceSQL, args: append(args, in.Version), check: func(n int64, err error) error {
			if err == nil && n != 1 {
				return fmt.Errorf("%w: update %s/%s: version %d is not the stored one, or the instance is gone", store.ErrConflict, typ, key, v)
			}
			return err
		}})
	}
	for _, e := range c.Inbox {
		ops = append(ops, op{sql: insertInboxSQL, args: []any{e.SagaType, e.Key, e.MessageID, micros(e.ProcessedAt)}})
	}
	for _, m := range c.Outbox {
		meta, body, err := sqlq.EncodeEnvelope(m.Envelope)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op{sql: insertOutboxSQL, args: []any{m.Envelope.ID, meta, body, micros(m.CreatedAt)}})
	}
	for _, t := range c.CancelTimers {
		ops = append(ops, op{sql: cancelTimerSQL, args: []any{t.SagaType, t.Key, t.Name}})
	}
	for _, t := range c.Timers {
		meta, body, err := sqlq.EncodeEnvelope(t.Envelope)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op{sql: upsertTimerSQL, args: []any{t.SagaType, t.Key, t.Name, micros(t.DueAt), t.Envelope.ID, meta, body}})
	}
	for _, j := range c.Journal {
		args, err := journalArgs(&j)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op{sql: insertJournalSQL, args: args})
	}
	for _, d := range c.DeadLetters {
		meta, body, err := sqlq.EncodeEnvelope(d.Envelope)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op{sql: upsertDeadLetterSQL, args: []any{d.ID, meta, body, d.Reason, d.Error, d.SagaType, d.Key, d.Attempts, micros(d.FirstFailedAt), micros(d.LastFailedAt), store.Fingerprint(d.Reason, d.Error)}})
	}
	for _, p := range []*store.SettleReplaysParams{c.SettleReplays, c.SettleDuplicates} {
		if p == nil {
			continue
		}
		for _, id := range p.IDs {
			ops = append(ops, op{sql: settleReplaySQL, args: []any{id, string(p.Outcome), micros(p.At), strings.ToValidUTF8(p.Error, "\uFFFD")}})
		}
	}
	for _, d := range u.consume {
		seq, tok, ok := sqlq.ParseToken(d.Token)
		if !ok {
			return nil, fmt.Errorf("sqlitestore: consume %s: delivery token %q is not from this store", d.Envelope.ID, d.Token)
		}
		id := d.Envelope.ID
		ops = append(ops, op{sql: consumeSQL, args: []any{seq, tok, clockNow{}}, check: func(n int64, err error) error {
			if err == nil && n != 1 {
				return fmt.Errorf("consume %s (queue row %d): %w", id, seq, transport.ErrLeaseLost)
			}
			return err
		}})
	}
	ops = append(ops, releaseOps(append(c.ReleaseHolds[:len(c.ReleaseHolds):len(c.ReleaseHolds)], sqlq.Holders(u.consume)...))...)
	ops = append(ops, tokenOps(c)...)
	ops = append(ops, clearRetryOps(c)...)
	rec, err := recordRetryOps(c)
	if err != nil {
		return nil, err
	}
	ops = append(ops, rec...)
	if len(u.enqueue) > 0 {
		now := micros(time.Now())
		for _, m := range u.enqueue {
			meta, body, err := sqlq.EncodeEnvelope(m)
			if err != nil {
				return nil, err
			}
			ops = append(ops, op{sql: enqueueSQL, args: []any{m.ID, meta, body, now}})
		}
	}
	return append(ops, u.planAdvances()...), nil
}

// instanceArgs returns ?1 to ?10 of insertInstanceSQL and updateInstanceSQL.
func instanceArgs(in *store.Instance) ([]any, error) {
	var timers sql.NullString
	if in.Timers != nil {
		b, err := json.Marshal(in.Timers)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: encode timers of %s/%s: %w", in.SagaType, in.Key, err)
		}
		timers = sql.NullString{String: string(b), Valid: true}
	}
	attrs, err := sqlq.AttributesJSON(in.Attributes)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %s/%s: %w", in.SagaType, in.Key, err)
	}
	return []any{in.SagaType, in.Key, in.State, string(in.Data), in.SchemaVersion, timers,
		micros(in.CreatedAt), micros(in.UpdatedAt), nullMicros(in.FinishedAt), attrs}, nil
}

// Rollback discards the unit of work; after Commit it does nothing.
func (u *unitOfWork) Rollback(context.Context) error {
	u.done = true
	_ = u.finishHeld(heldEnd{err: errRolledBack})
	return nil
}

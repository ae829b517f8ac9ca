package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idemhq/idem/internal/admit"
	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

var _ store.Limiter = (*Store)(nil)

// Flow control (store.Limiter) on SQLite: every admission is one request
// to the writer, so admissions are serialised by the database's write
// lock, across processes too. Holds expire by the process's clock, as the
// queue's leases do.

const setLimitSQL = `
INSERT INTO idem_limits (name, concurrency, rate, burst, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (name) DO UPDATE
SET concurrency = excluded.concurrency, rate = excluded.rate, burst = excluded.burst, updated_at = excluded.updated_at`

// SetLimit creates or replaces the override of l.Name.
func (s *Store) SetLimit(ctx context.Context, l store.Limit) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("sqlitestore: set limit: %w", err)
	}
	err := s.write(ctx, "set limit", 0, func(w *writer) error {
		_, err := w.exec(setLimitSQL, l.Name, l.Concurrency, l.Rate, l.Burst, micros(time.Now()))
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: set limit %q: %w", l.Name, err)
	}
	return nil
}

// ResetLimit removes the override of name; none is not an error.
func (s *Store) ResetLimit(ctx context.Context, name string) error {
	err := s.write(ctx, "reset limit", 0, func(w *writer) error {
		_, err := w.exec(`DELETE FROM idem_limits WHERE name = ?1`, name)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: reset limit %q: %w", name, err)
	}
	return nil
}

// Limits returns the overrides, ordered by name.
func (s *Store) Limits(ctx context.Context) ([]store.Limit, error) {
	return s.queryLimits(ctx, "limits", `SELECT name, concurrency, rate, burst, updated_at FROM idem_limits ORDER BY name`)
}

const declareLimitSQL = `
INSERT INTO idem_limits_declared (name, concurrency, rate, burst, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (name) DO UPDATE
SET concurrency = excluded.concurrency, rate = excluded.rate, burst = excluded.burst, updated_at = excluded.updated_at`

// DeclareLimits records the code's declarations in one transaction; the
// last writer wins.
func (s *Store) DeclareLimits(ctx context.Context, ls []store.Limit) error {
	for _, l := range ls {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("sqlitestore: declare limits: %w", err)
		}
	}
	at := micros(time.Now())
	err := s.write(ctx, "declare limits", 0, func(w *writer) error {
		for _, l := range ls {
			if _, err := w.exec(declareLimitSQL, l.Name, l.Concurrency, l.Rate, l.Burst, at); err != nil {
				return fmt.Errorf("limit %q: %w", l.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: declare limits: %w", err)
	}
	return nil
}

// DeclaredLimits returns the declarations, ordered by name.
func (s *Store) DeclaredLimits(ctx context.Context) ([]store.Limit, error) {
	return s.queryLimits(ctx, "declared limits", `SELECT name, concurrency, rate, burst, updated_at FROM idem_limits_declared ORDER BY name`)
}

// ForgetDeclarations deletes the declarations made more than olderThan
// ago, by the process's clock (the writers of one SQLite file share a
// host).
func (s *Store) ForgetDeclarations(ctx context.Context, olderThan time.Duration) (int, error) {
	if err := store.ValidateForgetAge(olderThan); err != nil {
		return 0, fmt.Errorf("sqlitestore: forget declarations: %w", err)
	}
	var n int64
	err := s.write(ctx, "forget declarations", 0, func(w *writer) error {
		var err error
		n, err = w.exec(`DELETE FROM idem_limits_declared AS d WHERE d.updated_at < ?1 AND NOT EXISTS (SELECT 1 FROM idem_limit_counters c WHERE c.name = d.name) AND NOT EXISTS (SELECT 1 FROM idem_limit_holds h WHERE h.name = d.name)`, micros(time.Now().Add(-olderThan)))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: forget declarations: %w", err)
	}
	return int(n), nil
}

// queryLimits runs q, which selects a limit's columns, on the readers.
func (s *Store) queryLimits(ctx context.Context, op, q string) ([]store.Limit, error) {
	if err := s.check(op); err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %s: %w", op, err)
	}
	defer rows.Close()
	var out []store.Limit
	for rows.Next() {
		var l store.Limit
		var at int64
		if err := rows.Scan(&l.Name, &l.Concurrency, &l.Rate, &l.Burst, &at); err != nil {
			return nil, fmt.Errorf("sqlitestore: %s: %w", op, err)
		}
		l.UpdatedAt = fromMicros(at)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: %s: %w", op, err)
	}
	return out, nil
}

// limitUsesSQL lists the counters with a bucket, a live hold or a
// message waiting for them (?1: now), with the rate and burst in force
// when the store knows them: the override's, else the declaration's. A
// message waits for the counter of its current refusal: visible, and not
// leased since it was recorded (the partial index idem_queue_refused
// holds the rows with one).
const limitUsesSQL = `
WITH live AS (
  SELECT name, key, count(*) AS n FROM idem_limit_holds WHERE expires_at > ?1 GROUP BY name, key
), waiting AS (
  SELECT refused_name AS name, refused_key AS key, count(*) AS n FROM idem_queue INDEXED BY idem_queue_refused
  WHERE refused_name IS NOT NULL AND visible_at <= ?1 AND attempt = refused_attempt
  GROUP BY refused_name, refused_key
), ks AS (
  SELECT name, key FROM idem_limit_counters WHERE tokens IS NOT NULL UNION SELECT name, key FROM live
  UNION SELECT name, key FROM waiting
)
SELECT ks.name, ks.key, coalesce(h.n, 0), coalesce(wt.n, 0), c.tokens, c.refilled_at,
  CASE WHEN l.name IS NULL THEN d.rate ELSE l.rate END, CASE WHEN l.name IS NULL THEN d.burst ELSE l.burst END
FROM ks
LEFT JOIN live h ON h.name = ks.name AND h.key = ks.key
LEFT JOIN waiting wt ON wt.name = ks.name AND wt.key = ks.key
LEFT JOIN idem_limit_counters c ON c.name = ks.name AND c.key = ks.key
LEFT JOIN idem_limits l ON l.name = ks.name
LEFT JOIN idem_limits_declared d ON d.name = ks.name
ORDER BY ks.name, ks.key`

// LimitUses returns every counter with a live hold, a bucket or a
// message waiting for it, ordered by (Name, Key).
func (s *Store) LimitUses(ctx context.Context) ([]store.LimitUse, error) {
	if err := s.check("limit uses"); err != nil {
		return nil, err
	}
	now := time.Now()
	rows, err := s.rdb.QueryContext(ctx, limitUsesSQL, micros(now))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: limit uses: %w", err)
	}
	defer rows.Close()
	var out []store.LimitUse
	for rows.Next() {
		var u store.LimitUse
		var tokens, rate sql.NullFloat64
		var at, burst sql.NullInt64
		if err := rows.Scan(&u.Name, &u.Key, &u.InFlight, &u.Waiting, &tokens, &at, &rate, &burst); err != nil {
			return nil, fmt.Errorf("sqlitestore: limit uses: %w", err)
		}
		u.Tokens = tokens.Float64
		if tokens.Valid && rate.Valid && rate.Float64 > 0 {
			u.Tokens = admit.Refilled(store.Limit{Rate: rate.Float64, Burst: int(burst.Int64)}, tokens.Float64, fromMicros(at.Int64), now)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: limit uses: %w", err)
	}
	return out, nil
}

const (
	bucketSQL      = `SELECT tokens, refilled_at FROM idem_limit_counters WHERE name = ?1 AND key = ?2`
	dropExpiredSQL = `DELETE FROM idem_limit_holds WHERE name = ?1 AND key = ?2 AND expires_at <= ?3`
	liveHoldsSQL   = `SELECT count(*) FROM idem_limit_holds WHERE name = ?1 AND key = ?2`
	insertHoldSQL  = `
INSERT INTO idem_limit_holds (name, key, holder, expires_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (name, key, holder) DO UPDATE SET expires_at = max(expires_at, excluded.expires_at)`
	saveBucketSQL = `
INSERT INTO idem_limit_counters (name, key, tokens, refilled_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (name, key) DO UPDATE SET tokens = excluded.tokens, refilled_at = excluded.refilled_at`
	releaseHoldsSQL = `DELETE FROM idem_limit_holds WHERE holder = ?1`
	extendHoldsSQL  = `UPDATE idem_limit_holds SET expires_at = ?2 WHERE holder = ?1 AND expires_at > ?3`
)

// Admit decides p's requests in order, in one write transaction (see
// store.Limiter).
func (s *Store) Admit(ctx context.Context, p *store.AdmitParams) ([]store.Admission, error) {
	if p == nil {
		p = &store.AdmitParams{TTL: time.Second}
	}
	if err := admit.Validate(p.Requests); err != nil {
		return nil, fmt.Errorf("sqlitestore: admit: %w", err)
	}
	if p.TTL <= 0 {
		return nil, fmt.Errorf("sqlitestore: admit: AdmitParams.TTL is %v: give how long a hold lives", p.TTL)
	}
	keys := admit.Keys(p.Limits, p.Requests)
	var adm []store.Admission
	if len(keys) == 0 {
		adm, _ = admit.Decide(p.Limits, p.Requests, nil, time.Now())
		return adm, nil
	}
	err := s.write(ctx, "admit", 0, func(w *writer) error {
		var err error
		adm, err = w.admit(p.Limits, p.Requests, keys, p.TTL)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: admit: %w", err)
	}
	return adm, nil
}

// admit decides reqs inside the writer's transaction: it reads the
// counters keys, decides, and writes the holds and buckets.
func (w *writer) admit(limits map[string]store.Limit, reqs []store.AdmitRequest, keys []store.LimitKey, ttl time.Duration) ([]store.Admission, error) {
	now := time.Now()
	cs, err := w.counters(keys, now)
	if err != nil {
		return nil, err
	}
	adm, holds := admit.Decide(limits, reqs, cs, now)
	exp := micros(now.Add(ttl))
	for i, hs := range holds {
		for _, k := range hs {
			if _, err := w.exec(insertHoldSQL, k.Name, k.Key, reqs[i].Holder, exp); err != nil {
				return nil, err
			}
		}
	}
	for k, c := range cs {
		if c.Refilled {
			if _, err := w.exec(saveBucketSQL, k.Name, k.Key, c.Tokens, micros(c.RefilledAt)); err != nil {
				return nil, err
			}
		}
	}
	return adm, nil
}

// counters reads the state of the counters keys at now, dropping their
// expired holds.
func (w *writer) counters(keys []store.LimitKey, now time.Time) (map[store.LimitKey]*admit.Counter, error) {
	cs := make(map[store.LimitKey]*admit.Counter, len(keys))
	for _, k := range keys {
		c := &admit.Counter{Fresh: true}
		rows, err := w.query(bucketSQL, k.Name, k.Key)
		if err != nil {
			return nil, err
		}
		var tokens sql.NullFloat64
		var at sql.NullInt64
		if rows.Next() {
			err = rows.Scan(&tokens, &at)
		}
		rows.Close()
		if err != nil {
			return nil, err
		}
		if tokens.Valid {
			c.Tokens, c.RefilledAt, c.Fresh = tokens.Float64, fromMicros(at.Int64), false
		}
		if _, err := w.exec(dropExpiredSQL, k.Name, k.Key, micros(now)); err != nil {
			return nil, err
		}
		if c.Live, err = w.count(liveHoldsSQL, k.Name, k.Key); err != nil {
			return nil, err
		}
		cs[k] = c
	}
	return cs, nil
}

// count runs q, which returns one integer.
func (w *writer) count(q string, args ...any) (int, error) {
	rows, err := w.query(q, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	if rows.Next() {
		err = rows.Scan(&n)
	}
	if err == nil {
		err = rows.Err()
	}
	return n, err
}

// ExtendHolds makes the live holds of holders expire ttl from now.
func (s *Store) ExtendHolds(ctx context.Context, holders []string, ttl time.Duration) error {
	if len(holders) == 0 {
		return nil
	}
	err := s.write(ctx, "extend holds", leaseOnly, func(w *writer) error {
		return w.extendHolds(holders, ttl)
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: extend holds: %w", err)
	}
	return nil
}

func (w *writer) extendHolds(holders []string, ttl time.Duration) error {
	until := time.Now().Add(ttl)
	for _, h := range holders {
		if err := w.extendHoldsUntil(h, until); err != nil {
			return err
		}
	}
	return nil
}

// extendHoldsUntil makes the live holds of holder expire at until.
func (w *writer) extendHoldsUntil(holder string, until time.Time) error {
	_, err := w.exec(extendHoldsSQL, holder, micros(until), micros(time.Now()))
	return err
}

// ReleaseHolds releases every hold of holders.
func (s *Store) ReleaseHolds(ctx context.Context, holders []string) error {
	if len(holders) == 0 {
		return nil
	}
	err := s.write(ctx, "release holds", wakeConsumers, func(w *writer) error {
		return runOps(w, releaseOps(holders))
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: release holds: %w", err)
	}
	return nil
}

// releaseOps are the statements that release the holds of holders.
func releaseOps(holders []string) []op {
	ops := make([]op, len(holders))
	for i, h := range holders {
		ops[i] = op{sql: releaseHoldsSQL, args: []any{h}}
	}
	return ops
}

// heldOf returns the holders among ds (admitted deliveries) and the write
// option that wakes consumers when there are any: a release may let a
// waiting message in.
func heldOf(ds []transport.Delivery) ([]string, writeOpts) {
	hs := sqlq.Holders(ds)
	if len(hs) == 0 {
		return nil, 0
	}
	return hs, wakeConsumers
}

// releasing returns, for fencedWrite, the release of holders' holds; nil
// when there are none.
func releasing(holders []string) func(*writer) error {
	if len(holders) == 0 {
		return nil
	}
	return func(w *writer) error { return runOps(w, releaseOps(holders)) }
}

// sweepReadSQL reads up to ?4 counters after (?2, ?3), in key order
// (BINARY: byte for byte), each with the rate and burst in force (the
// override's, else the declaration's) and whether it has a live hold at
// ?1.
const sweepReadSQL = `
SELECT c.name, c.key, c.tokens, c.refilled_at,
  CASE WHEN l.name IS NULL THEN d.rate ELSE l.rate END, CASE WHEN l.name IS NULL THEN d.burst ELSE l.burst END,
  EXISTS (SELECT 1 FROM idem_limit_holds h WHERE h.name = c.name AND h.key = c.key AND h.expires_at > ?1)
FROM idem_limit_counters c
LEFT JOIN idem_limits l ON l.name = c.name
LEFT JOIN idem_limits_declared d ON d.name = c.name
WHERE (c.name, c.key) > (?2, ?3)
ORDER BY c.name, c.key
LIMIT ?4`

const (
	sweepCounterSQL = `DELETE FROM idem_limit_counters WHERE name = ?1 AND key = ?2`
	sweepHoldsSQL   = `
DELETE FROM idem_limit_holds WHERE (name, key, holder) IN (
  SELECT name, key, holder FROM idem_limit_holds WHERE expires_at <= ?1 LIMIT ?2)`
)

// SweepCounters deletes up to p.Limit expired holds, and the counters no
// decision needs among p.Limit read after p.After (see store.Limiter), in
// one write transaction.
func (s *Store) SweepCounters(ctx context.Context, p *store.CounterSweepParams) (*store.CounterSweep, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("sqlitestore: sweep counters: %w", err)
	}
	var out *store.CounterSweep
	err := s.write(ctx, "sweep counters", 0, func(w *writer) error {
		var err error
		out, err = w.sweepCounters(p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: sweep counters: %w", err)
	}
	return out, nil
}

func (w *writer) sweepCounters(p *store.CounterSweepParams) (*store.CounterSweep, error) {
	now := time.Now()
	holds, err := w.exec(sweepHoldsSQL, micros(now), p.Limit)
	if err != nil {
		return nil, err
	}
	out := &store.CounterSweep{Holds: int(holds)}
	gone, err := w.sweepable(p, now, out)
	if err != nil {
		return nil, err
	}
	for _, k := range gone {
		if _, err := w.exec(sweepCounterSQL, k.Name, k.Key); err != nil {
			return nil, err
		}
	}
	out.Counters = len(gone)
	return out, nil
}

// sweepable reads p.Limit counters after p.After, sets out.Next, and
// returns those that no decision needs at now.
func (w *writer) sweepable(p *store.CounterSweepParams, now time.Time, out *store.CounterSweep) ([]store.LimitKey, error) {
	after := store.LimitKey{} // below every counter: a name is never empty
	if p.After != nil {
		after = *p.After
	}
	rows, err := w.query(sweepReadSQL, micros(now), after.Name, after.Key, p.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var gone []store.LimitKey
	read := 0
	for rows.Next() {
		var k store.LimitKey
		var tokens, rate sql.NullFloat64
		var at, burst sql.NullInt64
		var held bool
		if err := rows.Scan(&k.Name, &k.Key, &tokens, &at, &rate, &burst, &held); err != nil {
			return nil, err
		}
		read++
		if read == p.Limit {
			out.Next = &k
		}
		c := admit.Idle{Bucket: tokens.Valid, Tokens: tokens.Float64, RefilledAt: fromNullMicros(at), UsedAt: fromNullMicros(at)}
		if rate.Valid {
			c.Limit = &store.Limit{Name: k.Name, Rate: rate.Float64, Burst: int(burst.Int64)}
		}
		if !held && admit.Sweepable(c, now, p.Idle) {
			gone = append(gone, k)
		}
	}
	return gone, rows.Err()
}

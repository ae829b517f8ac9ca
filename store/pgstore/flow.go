package pgstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/admit"
	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

var _ store.Limiter = (*Store)(nil)

const setLimitSQL = `
INSERT INTO idem_limits (name, concurrency, rate, burst, updated_at) VALUES ($1, $2, $3, $4, now())
ON CONFLICT (name) DO UPDATE
SET concurrency = excluded.concurrency, rate = excluded.rate, burst = excluded.burst, updated_at = excluded.updated_at`

// SetLimit creates or replaces the override of l.Name.
func (s *Store) SetLimit(ctx context.Context, l store.Limit) error {
	if err := s.check("set limit"); err != nil {
		return err
	}
	if err := l.Validate(); err != nil {
		return fmt.Errorf("pgstore: set limit: %w", err)
	}
	if _, err := s.pool.Exec(ctx, setLimitSQL, l.Name, l.Concurrency, l.Rate, l.Burst); err != nil {
		return fmt.Errorf("pgstore: set limit %q: %w", l.Name, translate(err))
	}
	return nil
}

// ResetLimit removes the override of name; none is not an error.
func (s *Store) ResetLimit(ctx context.Context, name string) error {
	if err := s.check("reset limit"); err != nil {
		return err
	}
	if store.ValidateLimitText("Name", name) != nil {
		return nil // no such limit can be stored
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM idem_limits WHERE name = $1`, name); err != nil {
		return fmt.Errorf("pgstore: reset limit %q: %w", name, translate(err))
	}
	return nil
}

// Limits returns the overrides, ordered by name (byte for byte).
func (s *Store) Limits(ctx context.Context) ([]store.Limit, error) {
	return s.queryLimits(ctx, "limits", `SELECT name, concurrency, rate, burst, updated_at FROM idem_limits ORDER BY name COLLATE "C"`)
}

// declareLimitsSQL upserts the declarations $1.. (one element per name,
// in name order, so that two replicas declaring at once lock the rows in
// the same order).
const declareLimitsSQL = `
INSERT INTO idem_limits_declared (name, concurrency, rate, burst, updated_at)
SELECT u.*, now() FROM unnest($1::text[], $2::integer[], $3::double precision[], $4::integer[]) AS u
ON CONFLICT (name) DO UPDATE
SET concurrency = excluded.concurrency, rate = excluded.rate, burst = excluded.burst, updated_at = excluded.updated_at`

// DeclareLimits records the code's declarations in one statement; the
// last writer wins.
func (s *Store) DeclareLimits(ctx context.Context, ls []store.Limit) error {
	if err := s.check("declare limits"); err != nil {
		return err
	}
	byName := map[string]store.Limit{}
	for _, l := range ls {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("pgstore: declare limits: %w", err)
		}
		byName[l.Name] = l // a name given twice: the last one counts
	}
	names := slices.Sorted(maps.Keys(byName))
	cs, rs, bs := make([]int, len(names)), make([]float64, len(names)), make([]int, len(names))
	for i, n := range names {
		cs[i], rs[i], bs[i] = byName[n].Concurrency, byName[n].Rate, byName[n].Burst
	}
	if _, err := s.pool.Exec(ctx, declareLimitsSQL, names, cs, rs, bs); err != nil {
		return fmt.Errorf("pgstore: declare limits: %w", translate(err))
	}
	return nil
}

// DeclaredLimits returns the declarations, ordered by name (byte for
// byte).
func (s *Store) DeclaredLimits(ctx context.Context) ([]store.Limit, error) {
	return s.queryLimits(ctx, "declared limits", `SELECT name, concurrency, rate, burst, updated_at FROM idem_limits_declared ORDER BY name COLLATE "C"`)
}

// ForgetDeclarations deletes the declarations made more than olderThan
// ago, by the database's clock.
func (s *Store) ForgetDeclarations(ctx context.Context, olderThan time.Duration) (int, error) {
	if err := store.ValidateForgetAge(olderThan); err != nil {
		return 0, fmt.Errorf("pgstore: forget declarations: %w", err)
	}
	if err := s.check("forget declarations"); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM idem_limits_declared d WHERE d.updated_at < now() - $1::bigint * interval '1 microsecond' AND NOT EXISTS (SELECT 1 FROM idem_limit_counters c WHERE c.name = d.name) AND NOT EXISTS (SELECT 1 FROM idem_limit_holds h WHERE h.name = d.name)`, olderThan.Microseconds())
	if err != nil {
		return 0, fmt.Errorf("pgstore: forget declarations: %w", translate(err))
	}
	return int(tag.RowsAffected()), nil
}

// queryLimits runs q, which selects a limit's columns.
func (s *Store) queryLimits(ctx context.Context, op, q string) ([]store.Limit, error) {
	if err := s.check(op); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %s: %w", op, translate(err))
	}
	ls, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Limit, error) {
		var l store.Limit
		err := r.Scan(&l.Name, &l.Concurrency, &l.Rate, &l.Burst, &l.UpdatedAt)
		l.UpdatedAt = l.UpdatedAt.UTC()
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: %s: %w", op, translate(err))
	}
	return ls, nil
}

// limitUsesSQL lists the counters with a bucket, a live hold or a
// message waiting for them (a current refusal: visible, and not leased
// since it was recorded; the partial index idem_queue_refused holds the
// rows with one), with the rate and burst in force when the store knows
// them (the override's, else the declaration's), and the database's
// clock.
const limitUsesSQL = `
SELECT * FROM (
WITH live AS (
  SELECT name, key, count(*) AS n FROM idem_limit_holds WHERE expires_at > clock_timestamp() GROUP BY name, key
), waiting AS (
  SELECT refused_name AS name, refused_key AS key, count(*) AS n FROM idem_queue
  WHERE refused_name IS NOT NULL AND visible_at <= now() AND attempt = refused_attempt
  GROUP BY refused_name, refused_key
), ks AS (
  SELECT name, key FROM idem_limit_counters WHERE tokens IS NOT NULL
  UNION SELECT name, key FROM live
  UNION SELECT name, key FROM waiting
)
SELECT ks.name, ks.key, coalesce(h.n, 0), coalesce(w.n, 0), c.tokens, c.refilled_at,
  CASE WHEN l.name IS NULL THEN d.rate ELSE l.rate END, CASE WHEN l.name IS NULL THEN d.burst ELSE l.burst END,
  clock_timestamp()
FROM ks
LEFT JOIN live h ON h.name = ks.name AND h.key = ks.key
LEFT JOIN waiting w ON w.name = ks.name AND w.key = ks.key
LEFT JOIN idem_limit_counters c ON c.name = ks.name AND c.key = ks.key AND c.tokens IS NOT NULL
LEFT JOIN idem_limits l ON l.name = ks.name
LEFT JOIN idem_limits_declared d ON d.name = ks.name
) AS u(name, key, n, waiting, tokens, refilled_at, rate, burst, now)
ORDER BY name COLLATE "C", key COLLATE "C"`

// LimitUses returns every counter with a live hold, a bucket or a
// message waiting for it, ordered by (Name, Key).
func (s *Store) LimitUses(ctx context.Context) ([]store.LimitUse, error) {
	if err := s.check("limit uses"); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, limitUsesSQL)
	if err != nil {
		return nil, fmt.Errorf("pgstore: limit uses: %w", translate(err))
	}
	uses, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.LimitUse, error) {
		var u store.LimitUse
		var tokens, rate pgtype.Float8
		var burst pgtype.Int4
		var at pgtype.Timestamptz
		var now time.Time
		if err := r.Scan(&u.Name, &u.Key, &u.InFlight, &u.Waiting, &tokens, &at, &rate, &burst, &now); err != nil {
			return u, err
		}
		u.Tokens = tokens.Float64
		if tokens.Valid && rate.Valid && rate.Float64 > 0 {
			u.Tokens = admit.Refilled(store.Limit{Rate: rate.Float64, Burst: int(burst.Int32)}, tokens.Float64, at.Time, now)
		}
		return u, nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: limit uses: %w", translate(err))
	}
	return uses, nil
}

// lockCountersSQL creates the counters $1/$2 that do not exist and locks
// every one of them, in the order given (the callers sort by (Name, Key)),
// so that two admissions cannot deadlock. It returns each counter's bucket
// and the database's clock once the locks are held. A counter without a
// bucket (tokens NULL: it starts full) keeps in refilled_at when it was
// last locked, for SweepCounters to tell how long it has been idle.
const lockCountersSQL = `
INSERT INTO idem_limit_counters (name, key, refilled_at)
SELECT u.name, u.key, clock_timestamp() FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(name, key, ord) ORDER BY u.ord
ON CONFLICT (name, key) DO UPDATE
SET refilled_at = CASE WHEN idem_limit_counters.tokens IS NULL THEN excluded.refilled_at ELSE idem_limit_counters.refilled_at END
RETURNING name, key, tokens, refilled_at, clock_timestamp()`

// liveHoldsSQL counts the live holds of the counters $1/$2, after they
// are locked (a statement of its own: at READ COMMITTED it sees every
// hold that the previous holder of the locks committed). It drops the
// expired holds it can lock at once, and skips the others.
const liveHoldsSQL = `
WITH gone AS (
  DELETE FROM idem_limit_holds WHERE ctid IN (
    SELECT h.ctid FROM idem_limit_holds h JOIN unnest($1::text[], $2::text[]) AS u(name, key) ON h.name = u.name AND h.key = u.key
    WHERE h.expires_at <= clock_timestamp()
    FOR UPDATE OF h SKIP LOCKED)
)
SELECT h.name, h.key, count(*) FROM idem_limit_holds h
JOIN unnest($1::text[], $2::text[]) AS u(name, key) ON h.name = u.name AND h.key = u.key
WHERE h.expires_at > clock_timestamp()
GROUP BY h.name, h.key`

// insertHoldsSQL takes holds that expire $5 seconds after $4. A holder
// admitted again on a counter keeps one hold, with the later expiry.
const insertHoldsSQL = `
INSERT INTO idem_limit_holds (name, key, holder, expires_at)
SELECT u.name, u.key, u.holder, $4::timestamptz + make_interval(secs => $5)
FROM unnest($1::text[], $2::text[], $3::text[]) AS u(name, key, holder)
ON CONFLICT (name, key, holder) DO UPDATE SET expires_at = greatest(idem_limit_holds.expires_at, excluded.expires_at)`

const saveBucketsSQL = `
UPDATE idem_limit_counters c SET tokens = u.tokens, refilled_at = u.at
FROM unnest($1::text[], $2::text[], $3::float8[], $4::timestamptz[]) AS u(name, key, tokens, at)
WHERE c.name = u.name AND c.key = u.key`

// releaseHoldsSQL drops every hold of the holders $1.
const releaseHoldsSQL = `DELETE FROM idem_limit_holds WHERE holder = ANY($1::text[])`

// extendHoldsSQL makes the live holds of the holders $1 expire $2 seconds
// from now. It skips a hold locked by a transaction releasing it, and
// never waits.
const extendHoldsSQL = `
UPDATE idem_limit_holds h SET expires_at = now() + make_interval(secs => $2)
WHERE h.ctid IN (
  SELECT ctid FROM idem_limit_holds
  WHERE holder = ANY($1::text[]) AND expires_at > now()
  ORDER BY name, key, holder
  FOR UPDATE SKIP LOCKED)`

// Admit decides p's requests in order, in one transaction (see
// store.Limiter): BEGIN and the counters' locks and live holds in one
// round trip, the decision in Go, the holds and buckets with COMMIT in a
// second.
func (s *Store) Admit(ctx context.Context, p *store.AdmitParams) ([]store.Admission, error) {
	if p == nil {
		p = &store.AdmitParams{TTL: time.Second}
	}
	if err := s.check("admit"); err != nil {
		return nil, err
	}
	if err := admit.Validate(p.Requests); err != nil {
		return nil, fmt.Errorf("pgstore: admit: %w", err)
	}
	if p.TTL <= 0 {
		return nil, fmt.Errorf("pgstore: admit: AdmitParams.TTL is %v: give how long a hold lives", p.TTL)
	}
	keys := admit.Keys(p.Limits, p.Requests)
	if len(keys) == 0 {
		adm, _ := admit.Decide(p.Limits, p.Requests, nil, time.Now())
		return adm, nil
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: admit: %w", redact(err))
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(beginSQL)
	var cs map[store.LimitKey]*admit.Counter
	var now time.Time
	queueLock(b, keys, &cs, &now)
	var adm []store.Admission
	err = s.admitTx(ctx, conn, b, func() (*pgx.Batch, error) {
		var holds [][]store.LimitKey
		adm, holds = admit.Decide(p.Limits, p.Requests, cs, now)
		w := &pgx.Batch{}
		queueHolds(w, p.Requests, holds, cs, now, p.TTL)
		w.Queue(`COMMIT`)
		return w, nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: admit: %w", err)
	}
	return adm, nil
}

// admitTx sends first (which opens a transaction), then the batch that
// then returns, on conn; it rolls back when either fails.
func (s *Store) admitTx(ctx context.Context, conn *pgxpool.Conn, first *pgx.Batch, then func() (*pgx.Batch, error)) error {
	err := conn.SendBatch(ctx, first).Close()
	if err == nil {
		var b *pgx.Batch
		if b, err = then(); err == nil && b != nil {
			err = conn.SendBatch(ctx, b).Close()
		}
	}
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, rerr := conn.Exec(rctx, `ROLLBACK`); rerr != nil {
			conn.Conn().Close(rctx) //nolint:errcheck // the pool drops a closed connection
		}
		return translate(err)
	}
	return nil
}

// queueLock queues the locking of the counters keys and the count of
// their live holds, which fill *cs and *now (the database's clock once
// the locks are held) when the batch runs.
func queueLock(b *pgx.Batch, keys []store.LimitKey, cs *map[store.LimitKey]*admit.Counter, now *time.Time) {
	queueLockWith(b, lockCountersSQL, nil, keys, cs, now)
}

// queueLockWith is queueLock with the lock's statement q, which takes the
// names and keys, then args; a counter q does not return is not locked,
// and is left out of cs.
func queueLockWith(b *pgx.Batch, q string, args []any, keys []store.LimitKey, cs *map[store.LimitKey]*admit.Counter, now *time.Time) {
	names, ks := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		names[i], ks[i] = k.Name, k.Key
	}
	*cs = make(map[store.LimitKey]*admit.Counter, len(keys))
	b.Queue(q, append([]any{names, ks}, args...)...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var k store.LimitKey
			var tokens pgtype.Float8
			var at pgtype.Timestamptz
			if err := rows.Scan(&k.Name, &k.Key, &tokens, &at, now); err != nil {
				return err
			}
			(*cs)[k] = &admit.Counter{Tokens: tokens.Float64, RefilledAt: at.Time, Fresh: !tokens.Valid}
		}
		return rows.Err()
	})
	b.Queue(liveHoldsSQL, names, ks).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var k store.LimitKey
			var n int
			if err := rows.Scan(&k.Name, &k.Key, &n); err != nil {
				return err
			}
			if c := (*cs)[k]; c != nil {
				c.Live = n
			}
		}
		return rows.Err()
	})
}

// queueHolds queues the holds granted (holds[i] for reqs[i]), expiring
// ttl after now, and the buckets the decision changed.
func queueHolds(b *pgx.Batch, reqs []store.AdmitRequest, holds [][]store.LimitKey, cs map[store.LimitKey]*admit.Counter, now time.Time, ttl time.Duration) {
	var names, ks, holders []string
	for i, hs := range holds {
		for _, k := range hs {
			names, ks, holders = append(names, k.Name), append(ks, k.Key), append(holders, reqs[i].Holder)
		}
	}
	if len(holders) > 0 {
		b.Queue(insertHoldsSQL, names, ks, holders, now, ttl.Seconds())
	}
	var bn, bk []string
	var tokens []float64
	var ats []time.Time
	for k, c := range cs {
		if c.Refilled {
			bn, bk, tokens, ats = append(bn, k.Name), append(bk, k.Key), append(tokens, c.Tokens), append(ats, c.RefilledAt)
		}
	}
	if len(bn) > 0 {
		b.Queue(saveBucketsSQL, bn, bk, tokens, ats)
	}
}

// ExtendHolds makes the live holds of holders expire ttl from now, by the
// database's clock.
func (s *Store) ExtendHolds(ctx context.Context, holders []string, ttl time.Duration) error {
	if err := s.check("extend holds"); err != nil {
		return err
	}
	if len(holders) == 0 {
		return nil
	}
	if _, err := s.pool.Exec(ctx, extendHoldsSQL, storableTexts(holders), ttl.Seconds()); err != nil {
		return fmt.Errorf("pgstore: extend holds: %w", translate(err))
	}
	return nil
}

// ReleaseHolds releases every hold of holders.
func (s *Store) ReleaseHolds(ctx context.Context, holders []string) error {
	if err := s.check("release holds"); err != nil {
		return err
	}
	if len(holders) == 0 {
		return nil
	}
	if _, err := s.pool.Exec(ctx, releaseHoldsSQL, storableTexts(holders)); err != nil {
		return fmt.Errorf("pgstore: release holds: %w", translate(err))
	}
	s.notifySoon() // a waiting message may be admitted now, here or elsewhere
	return nil
}

// queueReleaseHolds queues the release of holders' holds; nothing when
// there are none.
func queueReleaseHolds(b *pgx.Batch, holders []string) {
	if len(holders) > 0 {
		b.Queue(releaseHoldsSQL, storableTexts(holders))
	}
}

// storableTexts drops the holders no hold can have (text PostgreSQL
// refuses), which would fail the whole statement.
func storableTexts(ss []string) []string {
	out := ss[:0:0]
	for _, s := range ss {
		if store.ValidateLimitText("Holder", s) == nil {
			out = append(out, s)
		}
	}
	return out
}

// releaseOf returns, for fencedWrite, the release of the holds of the
// admitted deliveries among ds; nil when none holds any (a plain
// Receive's), so that settling them costs no statement more.
func releaseOf(ds []transport.Delivery) func(*pgx.Batch) {
	hs := sqlq.Holders(ds)
	if len(hs) == 0 {
		return nil
	}
	return func(b *pgx.Batch) { queueReleaseHolds(b, hs) }
}

// sweepReadSQL locks up to $3 counters after ($1, $2), in the primary
// key's order, skipping those an admission holds, each with the rate and
// burst in force (the override's, else the declaration's) and the
// database's clock.
const sweepReadSQL = `
SELECT c.name, c.key, c.tokens, c.refilled_at,
  CASE WHEN l.name IS NULL THEN d.rate ELSE l.rate END, CASE WHEN l.name IS NULL THEN d.burst ELSE l.burst END,
  clock_timestamp()
FROM idem_limit_counters c
LEFT JOIN idem_limits l ON l.name = c.name
LEFT JOIN idem_limits_declared d ON d.name = c.name
WHERE (c.name, c.key) > ($1, $2)
ORDER BY c.name, c.key
LIMIT $3
FOR UPDATE OF c SKIP LOCKED`

// sweepCountersSQL deletes the counters $1/$2, locked by sweepReadSQL,
// that have no live hold: a statement of its own, which sees every hold
// committed before the locks were taken (no admission adds one to a
// counter it has not locked).
const sweepCountersSQL = `
DELETE FROM idem_limit_counters c USING unnest($1::text[], $2::text[]) AS u(name, key)
WHERE c.name = u.name AND c.key = u.key
  AND NOT EXISTS (SELECT 1 FROM idem_limit_holds h WHERE h.name = c.name AND h.key = c.key AND h.expires_at > clock_timestamp())`

// sweepHoldsSQL deletes up to $1 expired holds, skipping those a
// transaction holds.
const sweepHoldsSQL = `
DELETE FROM idem_limit_holds WHERE ctid IN (
  SELECT ctid FROM idem_limit_holds WHERE expires_at <= clock_timestamp() LIMIT $1 FOR UPDATE SKIP LOCKED)`

// SweepCounters deletes up to p.Limit expired holds, and the counters no
// decision needs among p.Limit read after p.After (see store.Limiter), in
// one transaction of two round trips: BEGIN and the read, which locks the
// counters it returns (never waiting for one); then the deletions and
// COMMIT. The decision is made in Go, on the counters' locked values.
func (s *Store) SweepCounters(ctx context.Context, p *store.CounterSweepParams) (*store.CounterSweep, error) {
	if err := s.check("sweep counters"); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: sweep counters: %w", err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: sweep counters: %w", redact(err))
	}
	defer conn.Release()
	sw := &counterSweep{p: p, out: &store.CounterSweep{}}
	b := &pgx.Batch{}
	b.Queue(beginSQL)
	sw.queueRead(b)
	err = s.admitTx(ctx, conn, b, func() (*pgx.Batch, error) { return sw.deletions(), nil })
	if err != nil {
		return nil, fmt.Errorf("pgstore: sweep counters: %w", err)
	}
	return sw.out, nil
}

// counterSweep is one SweepCounters transaction.
type counterSweep struct {
	p    *store.CounterSweepParams
	out  *store.CounterSweep
	gone []store.LimitKey // the counters read that no decision needs
}

// queueRead queues sweepReadSQL, which fills sw.gone and sw.out.Next.
func (sw *counterSweep) queueRead(b *pgx.Batch) {
	after := store.LimitKey{} // below every counter: a name is never empty
	if sw.p.After != nil {
		after = *sw.p.After
	}
	b.Queue(sweepReadSQL, after.Name, after.Key, sw.p.Limit).Query(func(rows pgx.Rows) error {
		read := 0
		for rows.Next() {
			var k store.LimitKey
			var tokens, rate pgtype.Float8
			var burst pgtype.Int4
			var at pgtype.Timestamptz
			var now time.Time
			if err := rows.Scan(&k.Name, &k.Key, &tokens, &at, &rate, &burst, &now); err != nil {
				return err
			}
			if read++; read == sw.p.Limit {
				sw.out.Next = &k
			}
			c := admit.Idle{Bucket: tokens.Valid, Tokens: tokens.Float64, RefilledAt: at.Time, UsedAt: at.Time}
			if rate.Valid {
				c.Limit = &store.Limit{Name: k.Name, Rate: rate.Float64, Burst: int(burst.Int32)}
			}
			if admit.Sweepable(c, now, sw.p.Idle) {
				sw.gone = append(sw.gone, k)
			}
		}
		return rows.Err()
	})
}

// deletions returns the batch that deletes sw.gone (those without a live
// hold) and expired holds, and commits.
func (sw *counterSweep) deletions() *pgx.Batch {
	b := &pgx.Batch{}
	if len(sw.gone) > 0 {
		names, keys := make([]string, len(sw.gone)), make([]string, len(sw.gone))
		for i, k := range sw.gone {
			names[i], keys[i] = k.Name, k.Key
		}
		b.Queue(sweepCountersSQL, names, keys).Exec(func(ct pgconn.CommandTag) error {
			sw.out.Counters = int(ct.RowsAffected())
			return nil
		})
	}
	b.Queue(sweepHoldsSQL, sw.p.Limit).Exec(func(ct pgconn.CommandTag) error {
		sw.out.Holds = int(ct.RowsAffected())
		return nil
	})
	b.Queue(`COMMIT`)
	return b
}

package pgstore

import (
	"context"
	"time"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/transport"
)

var _ transport.LeaseExtender = (*Store)(nil)

// LeaseDuration is Config.Lease, the queue's visibility timeout
// (transport.LeaseExtender).
func (s *Store) LeaseDuration() time.Duration { return s.cfg.Lease }

// extendSQL renews the leases of the rows $1 held with the claim tokens
// $2. It locks them in seq order and skips a row locked by another
// transaction: a unit of work's commit that consumes it (it needs no
// extension), a Nack or a claim. It never waits for a lock, so it cannot
// deadlock with a commit that deletes the same rows in another order. A
// held row (sqlq.HeldPrefix) past its lease is lost (sqlq.Lost) and not
// renewed.
const extendSQL = renewSQL + `
RETURNING q.seq`

// renewSQL is the UPDATE that extendSQL and extendHeldSQL share: it
// renews the leases of the rows $1 whose tokens are still $2.
const renewSQL = `
UPDATE idem_queue q SET visible_at = now() + make_interval(secs => $3)
FROM (
  SELECT r.seq FROM idem_queue r
  JOIN unnest($1::bigint[], $2::text[]) AS u(seq, token) ON r.seq = u.seq AND r.token = u.token
  WHERE r.visible_at > clock_timestamp() OR r.token NOT LIKE 'held%'
  ORDER BY r.seq
  FOR UPDATE OF r SKIP LOCKED
) c
WHERE q.seq = c.seq`

// extendHeldSQL is extendSQL for deliveries of which some are admitted:
// it also extends, to the same instant, the live holds of the rows it
// renewed (their holder is the delivery's token, seq:token), and of no
// other: a lost delivery's holds keep their expiry. It skips a hold
// locked by a transaction releasing it, and never waits.
const extendHeldSQL = `
WITH ext AS (` + renewSQL + `
  RETURNING q.seq, q.token
), held AS (
  UPDATE idem_limit_holds h SET expires_at = now() + make_interval(secs => $3)
  WHERE h.ctid IN (
    SELECT l.ctid FROM idem_limit_holds l JOIN ext ON l.holder = ext.seq::text || ':' || ext.token
    WHERE l.expires_at > now()
    ORDER BY l.name, l.key, l.holder
    FOR UPDATE OF l SKIP LOCKED)
)
SELECT seq FROM ext`

// ExtendLeases keeps leased deliveries invisible for Config.Lease from
// now, by the database's clock, while the engine still works on them, so
// that a batch slower than the Lease is not handed to another consumer.
// A delivery claimed since by another consumer is left alone and reported
// with transport.ErrLeaseLost, and so is an admitted delivery whose lease
// passed before this renewal (its holds expired with it, and another
// message may hold its slot); one acked or nacked already (a Nack
// retires the claim's token) is ignored, and keeps the Nack's delay. A
// row locked by a transaction settling it is skipped, not waited for.
// The holds of an admitted delivery are extended in the same statement
// as its lease, only when its lease is: a lost delivery's holds keep
// their expiry.
func (s *Store) ExtendLeases(ctx context.Context, ds []transport.Delivery) error {
	if err := s.check("extend leases"); err != nil {
		return err
	}
	q := extendSQL
	if len(sqlq.Holders(ds)) > 0 {
		q = extendHeldSQL
	}
	return s.fencedWrite(ctx, "extend lease", ds, false, nil, q, s.cfg.Lease.Seconds())
}

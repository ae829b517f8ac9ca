package sqlitestore

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

// extendSQL renews the lease of the row ?1 claimed with token ?2 until
// ?4, unless the claim is lost at ?3 (see consumeSQL).
const extendSQL = `UPDATE idem_queue SET visible_at = ?4 WHERE seq = ?1 AND token = ?2 AND (visible_at > ?3 OR substr(token, 1, 4) <> 'held')`

// ExtendLeases keeps leased deliveries invisible for Config.Lease from
// now while the engine still works on them, so that a batch slower than
// the Lease is not handed to another consumer. A delivery claimed since by
// another consumer is left alone and reported with transport.ErrLeaseLost,
// and so is an admitted delivery whose lease passed before this renewal
// (its holds expired with it, and another message may hold its slot);
// one acked or nacked already (a Nack retires the claim's token) is
// ignored, and keeps the Nack's delay. The holds of an admitted delivery
// are extended with its lease, to the same instant, and only when its
// lease is: a lost delivery's holds keep their expiry.
func (s *Store) ExtendLeases(ctx context.Context, ds []transport.Delivery) error {
	if err := s.check("extend leases"); err != nil {
		return err
	}
	until := time.Now().Add(s.cfg.Lease)
	var h fenceHooks
	if len(sqlq.Holders(ds)) > 0 {
		h.written = func(w *writer, d transport.Delivery) error {
			if len(sqlq.Holders([]transport.Delivery{d})) == 0 {
				return nil
			}
			return w.extendHoldsUntil(d.Token, until)
		}
	}
	return s.fencedWrite(ctx, "extend lease", leaseOnly, h, ds, extendSQL, micros(until))
}

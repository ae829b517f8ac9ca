package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/transport"
)

var _ transport.LeaseExtender = (*Store)(nil)

// LeaseDuration is Config.Lease, the queue's visibility timeout
// (transport.LeaseExtender).
func (s *Store) LeaseDuration() time.Duration { return s.cfg.Lease }

const extendSQL = `UPDATE idem_queue SET visible_at = ?3 WHERE seq = ?1 AND token = ?2`

// ExtendLeases keeps leased deliveries invisible for Config.Lease from
// now while the engine still works on them, so that a batch slower than
// the Lease is not handed to another consumer. A delivery claimed since by
// another consumer is left alone and reported with transport.ErrLeaseLost;
// one already deleted is not an error. It must not be called for a
// delivery after its Nack (the Nack's delay would be replaced); the
// engine stops renewing a delivery before it settles it.
func (s *Store) ExtendLeases(ctx context.Context, ds []transport.Delivery) error {
	if err := s.check("extend leases"); err != nil {
		return err
	}
	if len(ds) == 0 {
		return nil
	}
	seqs, toks, err := sqlq.SplitTokens(ds)
	if err != nil {
		return err
	}
	var lost []error
	err = s.write(ctx, "extend leases", leaseOnly, func(w *writer) error {
		lost = lost[:0]
		until := micros(time.Now().Add(s.cfg.Lease))
		for i := range seqs {
			n, err := w.exec(extendSQL, seqs[i], toks[i], until)
			if err != nil {
				return err
			}
			if n == 1 {
				continue
			}
			taken, err := w.fenced(seqs[i])
			if err != nil {
				return err
			}
			if taken {
				lost = append(lost, fmt.Errorf("sqlitestore: extend lease of %s (queue row %d): %w", ds[i].Envelope.ID, seqs[i], transport.ErrLeaseLost))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: extend leases: %w", err)
	}
	return errors.Join(lost...)
}

package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/transport"
)

var _ transport.LeaseExtender = (*Store)(nil)

// LeaseDuration is Config.Lease, the queue's visibility timeout
// (transport.LeaseExtender).
func (s *Store) LeaseDuration() time.Duration { return s.cfg.Lease }

// ExtendLeases keeps leased deliveries invisible for Config.Lease from
// now, by the database's clock, while the engine still works on them, so
// that a batch slower than the Lease is not handed to another consumer.
// A delivery claimed since by another consumer is left alone and reported
// with transport.ErrLeaseLost; one already deleted is not an error. It
// must not be called for a delivery after its Nack (the Nack's delay
// would be replaced); the engine stops renewing a delivery before it
// settles it.
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
	rows, err := s.pool.Query(ctx, `
UPDATE idem_queue q SET visible_at = now() + make_interval(secs => $3)
FROM unnest($1::bigint[], $2::text[]) AS u(seq, token)
WHERE q.seq = u.seq AND q.token = u.token
RETURNING q.seq`, seqs, toks, s.cfg.Lease.Seconds())
	if err != nil {
		return fmt.Errorf("pgstore: extend leases: %w", translate(err))
	}
	extended, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("pgstore: extend leases: %w", translate(err))
	}
	if len(extended) == len(ds) {
		return nil
	}
	return s.fenced(ctx, "extend lease", seqs, extended)
}

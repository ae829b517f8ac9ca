package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

var _ store.AdmissionWaiter = (*Store)(nil)

// admissionWaitsSQL reads the messages of partition hashtext($1) whose
// refusal is current (visible, not leased since it was recorded), in the
// queue's order, through the partial index idem_queue_refused; other keys
// of the same hash are filtered out in Go.
const admissionWaitsSQL = `
SELECT envelope, refused_name, refused_key, visible_at FROM idem_queue
WHERE part = hashtext($1) & 2147483647 AND refused_name IS NOT NULL
  AND visible_at <= now() AND attempt = refused_attempt
ORDER BY visible_at, seq
LIMIT $2`

// AdmissionWaitsOf returns the messages of key waiting for admission (see
// store.AdmissionWaiter), at most store.MaxAdmissionWaitsOf.
func (s *Store) AdmissionWaitsOf(ctx context.Context, key string) ([]store.AdmissionWait, error) {
	if err := s.check("admission waits"); err != nil {
		return nil, err
	}
	pk := partitionKey(&transport.Envelope{ID: key, CorrelationID: key})
	rows, err := s.pool.Query(ctx, admissionWaitsSQL, pk, 4*store.MaxAdmissionWaitsOf)
	if err != nil {
		return nil, fmt.Errorf("pgstore: admission waits of %q: %w", key, translate(err))
	}
	ws, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.AdmissionWait, error) {
		var w store.AdmissionWait
		var meta []byte
		if err := r.Scan(&meta, &w.Limit.Name, &w.Limit.Key, &w.VisibleAt); err != nil {
			return w, err
		}
		env, err := sqlq.DecodeEnvelope(meta, nil)
		if err != nil || transport.PartitionKey(&env) != key {
			return store.AdmissionWait{}, nil // another key of the same hash
		}
		w.MessageID, w.MessageType, w.VisibleAt = env.ID, env.Type, w.VisibleAt.UTC()
		return w, nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: admission waits of %q: %w", key, translate(err))
	}
	out := ws[:0]
	for _, w := range ws {
		if w.MessageID != "" && len(out) < store.MaxAdmissionWaitsOf {
			out = append(out, w)
		}
	}
	return out, nil
}

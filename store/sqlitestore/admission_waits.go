package sqlitestore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

var _ store.AdmissionWaiter = (*Store)(nil)

// admissionWaitsSQL reads the messages whose partition hashes to ?1 and
// whose refusal is current at ?2 (visible, not leased since it was
// recorded), in the queue's order, through the partial index
// idem_queue_refused; other keys of the same hash are filtered out in Go.
const admissionWaitsSQL = `
SELECT id, envelope, refused_name, refused_key, visible_at FROM idem_queue INDEXED BY idem_queue_refused
WHERE refused_part = ?1 AND refused_name IS NOT NULL
  AND visible_at <= ?2 AND attempt = refused_attempt
ORDER BY visible_at, seq
LIMIT ?3`

// AdmissionWaitsOf returns the messages of key waiting for admission (see
// store.AdmissionWaiter), at most store.MaxAdmissionWaitsOf.
func (s *Store) AdmissionWaitsOf(ctx context.Context, key string) ([]store.AdmissionWait, error) {
	if err := s.check("admission waits"); err != nil {
		return nil, err
	}
	part := int64(transport.PartitionHash(key))
	rows, err := s.rdb.QueryContext(ctx, admissionWaitsSQL, part, micros(time.Now()), 4*store.MaxAdmissionWaitsOf)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: admission waits of %q: %w", key, err)
	}
	defer rows.Close()
	var out []store.AdmissionWait
	for rows.Next() {
		var w store.AdmissionWait
		var id, meta string
		var visible int64
		if err := rows.Scan(&id, &meta, &w.Limit.Name, &w.Limit.Key, &visible); err != nil {
			return nil, fmt.Errorf("sqlitestore: admission waits of %q: %w", key, err)
		}
		env, err := sqlq.DecodeEnvelope([]byte(meta), nil)
		if err != nil {
			env = transport.Envelope{ID: id} // as Receive
		}
		if transport.PartitionKey(&env) != key || len(out) >= store.MaxAdmissionWaitsOf {
			continue // another key of the same hash
		}
		w.MessageID, w.MessageType, w.VisibleAt = env.ID, env.Type, fromMicros(visible)
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: admission waits of %q: %w", key, err)
	}
	return out, nil
}

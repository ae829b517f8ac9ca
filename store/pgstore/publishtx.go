package pgstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/transport"
)

// Publishing in the application's transaction. The application inserts
// its own rows and Idem's messages in one transaction of its own (from any
// pool on the same database: the tables are named with Config.Schema, so
// the transaction's search_path does not matter), and they commit or roll
// back together. Which method to call depends on the engine's transport:
//
//   - PublishTx when this store is also the engine's queue
//     (idem.NewEngine(st, st, …)): the messages go into the queue table,
//     and a NOTIFY sent in the same transaction wakes the consumers when
//     it commits;
//   - PublishOutboxTx when a broker is the transport: the messages go into
//     the outbox, and the engine's relay sends them once they are older
//     than Config.RelayAge (checked every Config.RelayInterval; defaults
//     5s and 1s). Call Engine.RelayOutbox(ctx, 0) after the commit to
//     send them at once.
//
// Messages published with PublishTx on a store that is not the engine's
// queue are never consumed; with PublishOutboxTx on a store that is, they
// are handed to the same queue by the relay (later than with PublishTx).

// PublishTx adds envs to this store's queue inside tx. The envelopes are
// validated as Publish and Engine.Publish validate them (a
// *transport.FieldError names a refused field); a zero SentAt becomes now.
func (s *Store) PublishTx(ctx context.Context, tx pgx.Tx, envs ...transport.Envelope) error {
	if err := s.check("publish tx"); err != nil {
		return err
	}
	envs, err := sqlq.PrepareTx("pgstore", envs, time.Now())
	if err != nil || len(envs) == 0 {
		return err
	}
	b := &pgx.Batch{}
	if err := queueEnqueue(b, envs); err != nil {
		return err
	}
	b.QueuedQueries[0].SQL = s.qualify(b.QueuedQueries[0].SQL)
	b.Queue(notifySQL, s.cfg.Schema) // delivered at commit, never before
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("pgstore: publish %d messages in transaction: %w", len(envs), translate(err))
	}
	return nil
}

// PublishOutboxTx adds envs to this store's outbox inside tx, for the
// engine's relay to send to its transport. Validation is PublishTx's; an
// envelope ID already in the outbox is left as it is.
func (s *Store) PublishOutboxTx(ctx context.Context, tx pgx.Tx, envs ...transport.Envelope) error {
	if err := s.check("publish outbox tx"); err != nil {
		return err
	}
	now := time.Now()
	envs, err := sqlq.PrepareTx("pgstore", envs, now)
	if err != nil || len(envs) == 0 {
		return err
	}
	n := len(envs)
	ids, metas, bodies, at := make([]string, n), make([]string, n), make([][]byte, n), make([]time.Time, n)
	for i, m := range envs {
		meta, body, err := sqlq.EncodeEnvelope(m)
		if err != nil {
			return err
		}
		ids[i], metas[i], bodies[i], at[i] = m.ID, meta, body, now
	}
	if _, err := tx.Exec(ctx, s.qualify(insertOutboxSQL), ids, metas, bodies, at); err != nil {
		return fmt.Errorf("pgstore: publish %d messages to the outbox in transaction: %w", n, translate(err))
	}
	return nil
}

// qualify names Idem's tables in q with the store's schema.
func (s *Store) qualify(q string) string {
	schema := pgx.Identifier{s.cfg.Schema}.Sanitize()
	for _, t := range []string{"idem_queue", "idem_outbox"} {
		q = strings.Replace(q, "INTO "+t+" ", "INTO "+schema+"."+t+" ", 1)
	}
	return q
}

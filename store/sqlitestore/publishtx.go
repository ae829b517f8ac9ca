package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/transport"
)

// Publishing in the application's transaction. The application opens its
// own *sql.DB on the Store's file (modernc.org/sqlite, driver name
// "sqlite"), inserts its rows and Idem's messages in one *sql.Tx, and they
// commit or roll back together. Which function to call depends on the
// engine's transport:
//
//   - PublishTx when the Store is also the engine's queue
//     (idem.NewEngine(st, st, …)): the messages go into the queue table;
//     consumers see them within Config.PollInterval (250ms by default; a
//     publish through another connection cannot wake them sooner);
//   - PublishOutboxTx when a broker is the transport: the messages go into
//     the outbox, and the engine's relay sends them once they are older
//     than its Config.RelayAge (checked every Config.RelayInterval). Call
//     Engine.RelayOutbox(ctx, 0) after the commit to send them at once.
//
// SQLite lets one connection write at a time, and the Store writes through
// one connection of its own, so the application's transaction competes
// with it for the file's write lock. Open the application's *sql.DB with a
// busy timeout and immediate transactions, for example
//
//	file:app.db?_pragma=busy_timeout(5000)&_txlock=immediate
//
// Open puts the file in WAL mode, which lasts. If the application may
// open the file before any Store has, it calls SetWAL rather than put
// journal_mode(WAL) in the DSN: that pragma fails at once with
// SQLITE_BUSY when processes open a new file together.
//
// With _txlock=immediate, BEGIN takes the write lock (waiting up to the
// busy timeout while the Store commits) and the transaction cannot fail
// later for want of it. A deferred transaction that reads first and then
// writes can fail with SQLITE_BUSY at once, whatever the timeout, when the
// Store committed in between (WAL mode cannot upgrade a stale snapshot).
// Keep the application's transaction short: while it holds the lock, the
// Store's writes wait, up to the Store's Config.BusyTimeout.

// PublishTx adds envs to the Store's queue inside tx, a transaction on the
// Store's database file. The envelopes are validated as Publish and
// Engine.Publish validate them (a *transport.FieldError names a refused
// field); a zero SentAt becomes now.
func PublishTx(ctx context.Context, tx *sql.Tx, envs ...transport.Envelope) error {
	envs, err := sqlq.PrepareTx("sqlitestore", envs, time.Now())
	if err != nil {
		return err
	}
	now := micros(time.Now())
	for _, m := range envs {
		meta, body, err := sqlq.EncodeEnvelope(m)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, enqueueSQL, m.ID, meta, body, now); err != nil {
			return fmt.Errorf("sqlitestore: publish %s in transaction: %w", m.ID, err)
		}
	}
	return nil
}

// PublishOutboxTx adds envs to the Store's outbox inside tx, for the
// engine's relay to send to its transport. Validation is PublishTx's; an
// envelope ID already in the outbox is left as it is.
func PublishOutboxTx(ctx context.Context, tx *sql.Tx, envs ...transport.Envelope) error {
	now := time.Now()
	envs, err := sqlq.PrepareTx("sqlitestore", envs, now)
	if err != nil {
		return err
	}
	for _, m := range envs {
		meta, body, err := sqlq.EncodeEnvelope(m)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, insertOutboxSQL, m.ID, meta, body, micros(now)); err != nil {
			return fmt.Errorf("sqlitestore: publish %s to the outbox in transaction: %w", m.ID, err)
		}
	}
	return nil
}

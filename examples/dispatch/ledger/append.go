package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// Appender appends the events the saga accepts to the ledger, each with its
// notification, through the saga's own transaction (pgstore.TxFrom or
// sqlitestore.TxFrom): the two rows commit with the state change that
// accepted the event, in the same transaction, or not at all.
type Appender struct {
	// Schema is the PostgreSQL schema of the ledger (the store's); it is
	// ignored on SQLite.
	Schema string
	// Writer names the writer in the rows (informational, never part of an
	// identity).
	Writer string
	// After, when set, runs in the transaction after the two inserts; an
	// error fails the message, which undoes them with the state change.
	// Tests inject faults with it.
	After func(ctx context.Context, ev Event) error
}

// ErrNoTransaction is wrapped by the dead letter of an event that the saga
// accepted on a store that shares no transaction with its sagas
// (memstore): the ledger row cannot be written with the state change.
var ErrNoTransaction = errors.New("the dispatch saga needs a SQLite or PostgreSQL store: it appends to the ledger in its own transaction")

// execFunc runs one statement in the saga's transaction.
type execFunc func(ctx context.Context, query string, args ...any) error

// sagaTx returns the saga's transaction on either store, and whether it is
// PostgreSQL's.
func sagaTx(c *saga.Context[Patient]) (execFunc, bool, error) {
	if tx, ok := pgstore.TxFrom(c); ok {
		return func(ctx context.Context, query string, args ...any) error {
			_, err := tx.Exec(ctx, query, args...)
			return err
		}, true, nil
	}
	if tx, ok := sqlitestore.TxFrom(c); ok {
		return func(ctx context.Context, query string, args ...any) error {
			_, err := tx.ExecContext(ctx, query, args...)
			return err
		}, false, nil
	}
	return nil, false, idem.Permanent(ErrNoTransaction)
}

// append inserts ev and its notification in the saga's transaction. The
// saga calls it only for the event that follows the patient's last one, so
// a copy never gets here: it needs no ON CONFLICT. An insert that fails (a
// concurrent writer holds the patient's seq, on PostgreSQL) is an ordinary
// error: the engine retries the message, which then finds the seq taken.
func (a Appender) append(c *saga.Context[Patient], ev Event) error {
	ctx := c.Context()
	exec, pg, err := sagaTx(c)
	if err != nil {
		return err
	}
	id := ev.ID()
	L, N := table(pg, a.Schema, Strict.Ledger), table(pg, a.Schema, Strict.Notifications)
	cast := ""
	if pg {
		cast = "::jsonb"
	}
	if err := exec(ctx, `INSERT INTO `+L+` (event_id, patient, seq, kind, payload, writer) VALUES ($1, $2, $3, $4, $5`+cast+`, $6)`,
		id, ev.Patient, ev.Seq, string(ev.Kind), payloadText(ev.Payload), a.Writer); err != nil {
		return fmt.Errorf("append %s: %w", id, err)
	}
	if err := exec(ctx, `INSERT INTO `+N+` (event_id, writer) VALUES ($1, $2)`, id, a.Writer); err != nil {
		return fmt.Errorf("append %s: notify: %w", id, err)
	}
	if a.After != nil {
		return a.After(ctx, ev)
	}
	return nil
}

// table returns the name of a ledger table as SQL must spell it:
// schema-qualified on PostgreSQL.
func table(pg bool, schema, name string) string {
	if pg {
		return pgx.Identifier{schema}.Sanitize() + "." + name
	}
	return name
}

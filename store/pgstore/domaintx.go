package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/store"
)

// DBTX runs a saga handler's statements in the unit of work's transaction.
// It is the subset of pgx.Tx that leaves the transaction to the engine (no
// Commit, Rollback or Begin), and the interface sqlc generates, so
// generated queries take it as they are. Close every Rows before the
// handler returns.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

// ErrTxEnded is returned by a DBTX used after its handler returned.
var ErrTxEnded = errors.New("pgstore: the handler's transaction handle is used after its handler returned")

// TxFrom returns the unit of work's transaction for the saga handler whose
// context is c (a *saga.Context), and false when the engine's store is not
// a pgstore.Store (memstore has no transaction to share).
//
// The statements commit with the state change, in the same transaction;
// they are undone when the message is not applied (the handler returns an
// error, ignores the message, or the unit of work conflicts, in which case
// the handler runs again in a new transaction). A statement that fails
// aborts the transaction up to the message: the engine then fails the
// message even if the handler ignored the error, so a partial effect never
// commits. The first statement opens a savepoint (one round trip), and the
// end of the handler releases it (one more).
func TxFrom(c interface{ Tx() any }) (DBTX, bool) {
	t, ok := c.Tx().(*msgTx)
	return t, ok
}

var _ store.DomainTxUnitOfWork = (*unitOfWork)(nil)

// MessageTx opens one message's scope; the savepoint waits for the first
// statement.
func (u *unitOfWork) MessageTx(context.Context) store.MessageTx { return &msgTx{u: u} }

// msgTx is one message's statements, inside a savepoint of the unit of
// work's transaction.
type msgTx struct {
	u      *unitOfWork
	open   bool  // the savepoint exists
	failed error // the savepoint could not be opened
	ended  bool
}

func (t *msgTx) Handle() any { return t }

const savepoint = `idem_message`

// begin opens the savepoint before the first statement.
func (t *msgTx) begin(ctx context.Context) (*pgx.Conn, error) {
	switch {
	case t.ended:
		return nil, ErrTxEnded
	case t.failed != nil:
		return nil, t.failed
	}
	if err := t.u.live("domain statement"); err != nil {
		t.failed = err
		return nil, err
	}
	c := t.u.conn.Conn()
	if t.open {
		return c, nil
	}
	q := `SAVEPOINT ` + savepoint
	if !t.u.begun {
		q = beginSQL + `; ` + q
	}
	if _, err := c.Exec(ctx, q); err != nil {
		t.failed = fmt.Errorf("pgstore: open savepoint for the handler's statements: %w", translate(err))
		return nil, t.failed
	}
	t.u.begun, t.open = true, true
	return c, nil
}

// End releases the savepoint (keep) or rolls back to it. Releasing fails
// when a statement failed (SQLSTATE 25P02): the statements are then
// undone and the error returned.
func (t *msgTx) End(ctx context.Context, keep bool) error {
	if t.ended {
		return nil
	}
	t.ended = true
	if t.failed != nil {
		return t.failed
	}
	if !t.open {
		return nil
	}
	c := t.u.conn.Conn()
	if keep {
		_, err := c.Exec(ctx, `RELEASE SAVEPOINT `+savepoint)
		if err == nil {
			return nil
		}
		if _, rerr := c.Exec(ctx, `ROLLBACK TO SAVEPOINT `+savepoint+`; RELEASE SAVEPOINT `+savepoint); rerr != nil {
			return fmt.Errorf("pgstore: release the handler's savepoint: %w; roll back to it: %w", translate(err), translate(rerr))
		}
		return fmt.Errorf("pgstore: the handler's statements were undone: %w", translate(err))
	}
	if _, err := c.Exec(ctx, `ROLLBACK TO SAVEPOINT `+savepoint+`; RELEASE SAVEPOINT `+savepoint); err != nil {
		return fmt.Errorf("pgstore: roll back the handler's statements: %w", translate(err))
	}
	return nil
}

func (t *msgTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c, err := t.begin(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return c.Exec(ctx, sql, args...)
}

func (t *msgTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return c.Query(ctx, sql, args...)
}

func (t *msgTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c, err := t.begin(ctx)
	if err != nil {
		return errRow{err}
	}
	return c.QueryRow(ctx, sql, args...)
}

func (t *msgTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	c, err := t.begin(ctx)
	if err != nil {
		return errBatch{err}
	}
	return c.SendBatch(ctx, b)
}

func (t *msgTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	c, err := t.begin(ctx)
	if err != nil {
		return 0, err
	}
	return c.CopyFrom(ctx, table, columns, src)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
func (b errBatch) Tx() pgx.Tx                       { return nil }

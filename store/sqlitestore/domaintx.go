package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemhq/idem/store"
)

// Domain statements. A unit of work of this store holds no connection
// until Commit, which hands its writes to the Store's single writer. A
// handler that runs statements needs the write transaction earlier: its
// first statement asks the writer for it (a request like a Commit's, in
// the writer's next group) and the unit of work keeps the writer until it
// commits or rolls back. Meanwhile the other writes wait, so only units of
// work whose handlers run statements pay for it, for as long as their
// batch takes to apply. Each message's statements run inside a savepoint,
// undone when the message is not applied.

// DBTX runs a saga handler's statements in the unit of work's transaction:
// the methods of *sql.Tx that leave the transaction to the engine, and the
// interface sqlc generates for database/sql. Statements ignore the
// cancellation of ctx (interrupting SQLite would roll back the writer's
// whole transaction, other requests included). Close every *sql.Rows before
// the handler returns.
type DBTX interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ErrTxEnded is returned by a DBTX used after its handler returned.
var ErrTxEnded = errors.New("sqlitestore: the handler's transaction handle is used after its handler returned")

// TxFrom returns the unit of work's transaction for the saga handler whose
// context is c (a *saga.Context), and false when the engine's store is not
// a sqlitestore.Store (memstore has no transaction to share).
//
// The statements commit with the state change, in the same transaction;
// they are undone when the message is not applied (the handler returns an
// error, ignores the message, or the unit of work conflicts, in which case
// the handler runs again in a new transaction). SQLite keeps a failed
// statement's transaction usable: a statement error the handler ignores
// leaves the statements before it in place, as it would in any *sql.Tx.
// A handler must not call the Store's own methods (Publish, …): the
// writer waits for the handler's unit of work, which waits for the handler.
func TxFrom(c interface{ Tx() any }) (DBTX, bool) {
	t, ok := c.Tx().(*msgTx)
	return t, ok
}

var _ store.DomainTxUnitOfWork = (*unitOfWork)(nil)

// MessageTx opens one message's scope; nothing happens before its first
// statement.
func (u *unitOfWork) MessageTx(context.Context) store.MessageTx { return &msgTx{u: u} }

// held is the writer a unit of work keeps for its handlers' statements.
type held struct {
	w     *writer
	ready chan *writer
	next  chan heldEnd
	res   chan error
	ended bool
}

// heldEnd finishes the held request: run ops, or fail with err.
type heldEnd struct {
	ops []op
	err error
}

var errRolledBack = errors.New("unit of work rolled back")

// hold asks the writer for a transaction and keeps it until Commit or
// Rollback.
func (u *unitOfWork) hold(ctx context.Context) (*writer, error) {
	if u.held != nil {
		if u.held.w == nil || u.held.ended {
			return nil, errors.New("sqlitestore: the unit of work could not hold the writer")
		}
		return u.held.w, nil
	}
	h := &held{ready: make(chan *writer, 1), next: make(chan heldEnd, 1), res: make(chan error, 1)}
	u.held = h
	go func() {
		h.res <- u.s.write(ctx, "commit", wakeConsumers, func(w *writer) error {
			h.ready <- w
			end := <-h.next
			if end.err != nil {
				return end.err
			}
			return runOps(w, end.ops)
		})
	}()
	select {
	case w := <-h.ready:
		h.w = w
		return w, nil
	case err := <-h.res:
		h.ended = true
		return nil, fmt.Errorf("sqlitestore: begin the handler's transaction: %w", err)
	}
}

// finishHeld ends the held request with end and returns its outcome.
func (u *unitOfWork) finishHeld(end heldEnd) error {
	h := u.held
	if h == nil || h.w == nil || h.ended {
		return nil
	}
	h.ended = true
	h.next <- end
	return <-h.res
}

// msgTx is one message's statements, inside a savepoint of the held
// writer's transaction.
type msgTx struct {
	u      *unitOfWork
	w      *writer
	failed error // the savepoint could not be opened
	ended  bool
}

func (t *msgTx) Handle() any { return t }

const savepoint = `idem_message`

func (t *msgTx) begin(ctx context.Context) (*sql.Conn, error) {
	switch {
	case t.ended:
		return nil, ErrTxEnded
	case t.failed != nil:
		return nil, t.failed
	case t.w != nil:
		return t.w.s.wconn, nil
	}
	if err := t.u.live("domain statement"); err != nil {
		t.failed = err
		return nil, err
	}
	w, err := t.u.hold(ctx)
	if err == nil {
		err = w.raw(`SAVEPOINT ` + savepoint)
	}
	if err != nil {
		t.failed = err
		return nil, err
	}
	t.w = w
	return w.s.wconn, nil
}

// End releases the savepoint (keep) or rolls back to it. A savepoint that
// cannot be released or rolled back to means SQLite ended the whole
// transaction: the unit of work then fails at Commit.
func (t *msgTx) End(_ context.Context, keep bool) error {
	if t.ended {
		return nil
	}
	t.ended = true
	if t.failed != nil {
		return t.failed
	}
	if t.w == nil {
		return nil
	}
	var err error
	if keep {
		err = t.w.raw(`RELEASE ` + savepoint)
	} else if err = t.w.raw(`ROLLBACK TO ` + savepoint); err == nil {
		err = t.w.raw(`RELEASE ` + savepoint)
	}
	if err != nil {
		err = fmt.Errorf("sqlitestore: end the handler's savepoint: %w", err)
		t.u.broken = err
	}
	return err
}

func (t *msgTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	c, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return c.ExecContext(context.WithoutCancel(ctx), query, args...)
}

func (t *msgTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	c, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return c.PrepareContext(context.WithoutCancel(ctx), query)
}

func (t *msgTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	c, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return c.QueryContext(context.WithoutCancel(ctx), query, args...)
}

// QueryRowContext runs query. When the transaction cannot be had, the
// row's Scan reports context.Canceled (database/sql lets no other error
// into a *sql.Row), and the message fails with the real cause.
func (t *msgTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	c, err := t.begin(ctx)
	if err != nil {
		done, cancel := context.WithCancel(ctx)
		cancel()
		return t.u.s.rdb.QueryRowContext(done, query, args...)
	}
	return c.QueryRowContext(context.WithoutCancel(ctx), query, args...)
}

// runOps executes a commit's statements in the writer's transaction.
func runOps(w *writer, ops []op) error {
	for _, o := range ops {
		n, err := w.exec(o.sql, o.args...)
		if o.check != nil {
			err = o.check(n, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

package store

import "context"

// DomainTxUnitOfWork is implemented by the units of work of stores that let
// a saga handler run its own statements (a ledger row, an imported chunk)
// in the unit of work's transaction, so that they commit with the state
// change or not at all. The engine asks for one MessageTx per message it
// applies; a store's typed accessor (pgstore.TxFrom, sqlitestore.TxFrom)
// reads the handle from the saga's context.
type DomainTxUnitOfWork interface {
	UnitOfWork
	// MessageTx opens a scope for one message's statements. It does no
	// I/O: the store opens a savepoint (and, if it needs to, the
	// transaction) only when the handler runs its first statement.
	MessageTx(ctx context.Context) MessageTx
}

// MessageTx is one message's statements inside a unit of work.
type MessageTx interface {
	// Handle is the value the handler's context carries; only the store
	// that made it can use it.
	Handle() any
	// End keeps the statements (keep) or undoes them. When keep is true
	// and the statements cannot be kept (one of them failed, and the
	// database aborted the transaction), End undoes them and returns why;
	// the engine then fails the message. After End the handle refuses
	// every statement.
	End(ctx context.Context, keep bool) error
}

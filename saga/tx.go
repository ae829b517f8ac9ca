package saga

import "context"

// Tx returns the handle of the unit of work's transaction that the engine
// set for this message, or nil when the store has none (memstore). Use the
// store's typed accessor instead of this: pgstore.TxFrom(c) or
// sqlitestore.TxFrom(c). Statements run through it commit with the state
// change; when the message is not applied (the handler returns an error,
// ignores the message, or the unit of work conflicts and is retried) they
// are undone, and the handler may run again with a fresh transaction.
func (c *Context[S]) Tx() any { return c.tx }

// Context returns the context for the statements a handler runs through
// Tx. It ends when the engine stops. Handlers must not perform other I/O.
func (c *Context[S]) Context() context.Context {
	if c.ctx == nil {
		return context.Background()
	}
	return c.ctx
}

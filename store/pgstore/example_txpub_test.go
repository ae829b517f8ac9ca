package pgstore_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// PublishTx: the application's order and the event that announces it
// commit in one transaction of the application's own pool. With a broker
// as the engine's transport, call PublishOutboxTx instead.
func ExampleStore_PublishTx() {
	ctx := context.Background()
	var st *pgstore.Store // pgstore.Open(ctx, url, nil); the engine's store and queue
	var app *pgxpool.Pool // the application's pool on the same database
	tx, err := app.Begin(ctx)
	if err != nil {
		return
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, "o-1"); err != nil {
		return
	}
	env := transport.Envelope{ID: "order-placed-o-1", Type: "orders.Placed", Body: []byte(`{"order":"o-1"}`)}
	if err := st.PublishTx(ctx, tx, env); err != nil {
		return
	}
	_ = tx.Commit(ctx) // the NOTIFY sent with the row wakes the consumers now
}

// TxFrom: a saga handler writes a ledger row in the unit of work's
// transaction, so it commits with the state change or not at all.
func ExampleTxFrom() {
	type Account struct{ Balance int }
	type Deposit struct {
		Acct   string
		Amount int
	}
	m := saga.New[Account]("account")
	open := m.State("Open")
	deposit := saga.NewEvent[Deposit](m, func(d Deposit) string { return d.Acct })
	m.Initially(saga.When(deposit).Then(func(c *saga.Context[Account], d Deposit) error {
		tx, ok := pgstore.TxFrom(c)
		if !ok {
			return idem.Permanent(fmt.Errorf("account needs a PostgreSQL store"))
		}
		if _, err := tx.Exec(c.Context(), `INSERT INTO ledger (message_id, acct, amount) VALUES ($1, $2, $3)`,
			c.MessageID(), d.Acct, d.Amount); err != nil {
			return err
		}
		c.Data.Balance += d.Amount
		return nil
	}).TransitionTo(open))
}

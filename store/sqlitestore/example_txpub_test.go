package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
)

// PublishTx: the application inserts its order and the event that
// announces it in one transaction of its own, on its own *sql.DB on the
// store's file. Both commit, or neither does.
func ExamplePublishTx() {
	dir, err := os.MkdirTemp("", "idem-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	path := filepath.Join(dir, "app.db")
	st, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	// Immediate transactions and a busy timeout: the Store writes to the
	// same file through a connection of its own.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES ('o-1')`); err != nil {
		log.Fatal(err)
	}
	env := transport.Envelope{ID: "order-placed-o-1", Type: "orders.Placed", Body: []byte(`{"order":"o-1"}`)}
	if err := sqlitestore.PublishTx(ctx, tx, env); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	ds, err := st.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("queued:", ds[0].Envelope.ID)
	// Output: queued: order-placed-o-1
}

// Account is the example's saga state.
type Account struct{ Balance int }

// Deposit is the example's message.
type Deposit struct {
	Acct   string
	Amount int
}

// TxFrom: a saga handler writes a ledger row in the unit of work's
// transaction. The row commits with the new balance, or not at all.
func ExampleTxFrom() {
	dir, err := os.MkdirTemp("", "idem-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "bank.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	m := saga.New[Account]("account")
	open := m.State("Open")
	deposit := saga.NewEvent[Deposit](m, func(d Deposit) string { return d.Acct })
	apply := func(c *saga.Context[Account], d Deposit) error {
		tx, ok := sqlitestore.TxFrom(c)
		if !ok {
			return idem.Permanent(fmt.Errorf("account needs a SQLite store"))
		}
		// The handler may run again after a conflict: this insert is
		// rolled back with the unit of work, so it never doubles.
		if _, err := tx.ExecContext(c.Context(), `INSERT INTO ledger (message_id, acct, amount) VALUES (?, ?, ?)`,
			c.MessageID(), d.Acct, d.Amount); err != nil {
			return err // the handler-error path: retried, then dead-lettered
		}
		c.Data.Balance += d.Amount
		return nil
	}
	m.Initially(saga.When(deposit).Then(apply).TransitionTo(open))
	m.During(open, saga.When(deposit).Then(apply))

	e, err := idem.NewEngine(st, st, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Register(m); err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+st.Path()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE ledger (message_id TEXT, acct TEXT, amount INTEGER)`); err != nil {
		log.Fatal(err)
	}
	env, err := e.NewEnvelope("dep-1", Deposit{Acct: "a-1", Amount: 5})
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Publish(ctx, env, env); err != nil { // a duplicate, too
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer e.Stop(ctx) //nolint:errcheck // the example ends
	for deadline := time.Now().Add(10 * time.Second); e.Stats().Applied+e.Stats().Duplicates < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	var rows, sum int
	if err := db.QueryRowContext(ctx, `SELECT count(*), sum(amount) FROM ledger`).Scan(&rows, &sum); err != nil {
		log.Fatal(err)
	}
	fmt.Println("ledger rows:", rows, "sum:", sum)
	// Output: ledger rows: 1 sum: 5
}

package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/store/storetest"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// appDB opens the application's own *sql.DB on the store's file, as the
// package documentation recommends, with an orders table.
func appDB(t testing.TB, st *sqlitestore.Store) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+st.Path()+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return db
}

// seen records the messages a plain handler received.
type seen struct {
	mu  sync.Mutex
	ids map[string]int
}

func (s *seen) handle(_ context.Context, env idem.Envelope) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[env.ID]++
	return nil
}

func (s *seen) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

func txEngine(t *testing.T, st *sqlitestore.Store, tr transport.Transport) (*idem.Engine, *seen) {
	t.Helper()
	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s := &seen{ids: map[string]int{}}
	if err := e.Handle("order.placed", s.handle); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Stop(ctx)
	})
	return e, s
}

// placeOrder inserts an order and publishes its event in one application
// transaction, committed or rolled back.
func placeOrder(t testing.TB, db *sql.DB, id string, commit bool, publish func(context.Context, *sql.Tx, ...transport.Envelope) error) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, id); err != nil {
		t.Fatal(err)
	}
	if err := publish(ctx, tx, transport.Envelope{ID: id, Type: "order.placed", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if !commit {
		return
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// Both paths: a rolled-back transaction sends nothing, a committed one
// sends exactly once.
func TestPublishTx(t *testing.T) {
	for _, tc := range []struct {
		name    string
		broker  bool
		publish func(context.Context, *sql.Tx, ...transport.Envelope) error
	}{
		{"queue", false, sqlitestore.PublishTx},
		{"outbox and broker", true, sqlitestore.PublishOutboxTx},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t, sqlitestore.Config{PollInterval: 10 * time.Millisecond})
			var tr transport.Transport = st
			var broker *memtransport.Transport
			if tc.broker {
				broker = memtransport.New(nil)
				t.Cleanup(func() { _ = broker.Close() })
				tr = broker
			}
			e, got := txEngine(t, st, tr)
			db := appDB(t, st)
			placeOrder(t, db, "rolled-back", false, tc.publish)
			placeOrder(t, db, "committed", true, tc.publish)
			if tc.broker {
				n, err := e.RelayOutbox(context.Background(), 0)
				if err != nil || n != 1 {
					t.Fatalf("relay: sent %d, %v; want 1, nil", n, err)
				}
			}
			enginetest.WaitFor(t, 10*time.Second, "the committed order's event handled", func() (bool, error) { return got.count("committed") == 1, nil })
			if tc.broker {
				if n, err := e.RelayOutbox(context.Background(), 0); err != nil || n != 0 {
					t.Errorf("second relay: sent %d, %v; want 0, nil", n, err)
				}
				if p := broker.Stats().Published; p != 1 {
					t.Errorf("broker published %d messages, want 1", p)
				}
			}
			var orders int
			if err := db.QueryRow(`SELECT count(*) FROM orders`).Scan(&orders); err != nil {
				t.Fatal(err)
			}
			if s := e.Stats(); got.count("rolled-back") != 0 || s.Received != 1 || orders != 1 {
				t.Errorf("rolled back handled %d times, received %d deliveries, %d orders; want 0, 1, 1", got.count("rolled-back"), s.Received, orders)
			}
		})
	}
}

// The application's transactions compete with the Store's writer for the
// file's write lock while the engine consumes: with a busy timeout and
// immediate transactions, none fails and every event is handled once.
func TestPublishTxConcurrentWithTheStore(t *testing.T) {
	st := openStore(t, sqlitestore.Config{PollInterval: 10 * time.Millisecond})
	e, got := txEngine(t, st, st)
	db := appDB(t, st)
	const writers, each = 4, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				placeOrder(t, db, fmt.Sprintf("o-%d-%d", w, i), true, sqlitestore.PublishTx)
			}
		}()
	}
	wg.Wait()
	enginetest.WaitFor(t, 30*time.Second, "every event handled", func() (bool, error) { return e.Stats().Applied >= writers*each, nil })
	for w := range writers {
		for i := range each {
			if n := got.count(fmt.Sprintf("o-%d-%d", w, i)); n != 1 {
				t.Errorf("o-%d-%d handled %d times, want 1", w, i, n)
			}
		}
	}
}

// Envelopes are validated as Publish validates them, naming the field.
func TestPublishTxRefusesBadEnvelopes(t *testing.T) {
	st := openStore(t, sqlitestore.Config{})
	db := appDB(t, st)
	for _, publish := range []func(context.Context, *sql.Tx, ...transport.Envelope) error{sqlitestore.PublishTx, sqlitestore.PublishOutboxTx} {
		for _, env := range []transport.Envelope{{Type: "t"}, {ID: "x"}, {ID: "a\x00b", Type: "t"}, {ID: "x", Type: "t\xff"}, {ID: "x", Type: "<script>\n"}} {
			tx, err := db.Begin()
			if err != nil {
				t.Fatal(err)
			}
			err = publish(context.Background(), tx, env)
			_ = tx.Rollback()
			var fe *transport.FieldError
			if !errors.As(err, &fe) {
				t.Errorf("publish %q/%q: got %v, want a *transport.FieldError", env.ID, env.Type, err)
			}
		}
	}
}

// The ledger saga through the engine on SQLite.
func TestDomainTxThroughEngine(t *testing.T) {
	st := openStore(t, sqlitestore.Config{PollInterval: 10 * time.Millisecond})
	db := appDB(t, st)
	if _, err := db.Exec(enginetest.LedgerTable); err != nil {
		t.Fatal(err)
	}
	enginetest.DomainTx(t, enginetest.DomainTxCase{
		Store: st, Transport: st,
		Exec: func(c *saga.Context[enginetest.Account], q string, args ...any) (bool, error) {
			tx, ok := sqlitestore.TxFrom(c)
			if !ok {
				return false, nil
			}
			_, err := tx.ExecContext(c.Context(), strings.ReplaceAll(q, "$", "?"), args...)
			return true, err
		},
		Ledger: func(ctx context.Context) (map[string]int, map[string]int, error) {
			return ledger(ctx, db)
		},
	})
}

func ledger(ctx context.Context, db *sql.DB) (map[string]int, map[string]int, error) {
	rows, err := db.QueryContext(ctx, `SELECT message_id, acct, amount FROM ledger`)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	n, sums := map[string]int{}, map[string]int{}
	for rows.Next() {
		var id, acct string
		var amount int
		if err := rows.Scan(&id, &acct, &amount); err != nil {
			return nil, nil, err
		}
		n[id]++
		sums[acct] += amount
	}
	return n, sums, rows.Err()
}

// On memstore there is no transaction to share: TxFrom reports false and
// the context's handle is nil.
func TestDomainTxOnMemstore(t *testing.T) {
	st := memstore.New(nil)
	tr := memtransport.New(nil)
	t.Cleanup(func() { _ = tr.Close() })
	type probe struct {
		K string `json:"k"`
	}
	m := saga.New[struct{}]("probe")
	ev := saga.NewEvent[probe](m, func(p probe) string { return p.K })
	res := make(chan [2]bool, 1)
	m.Initially(saga.When(ev).Then(func(c *saga.Context[struct{}], _ probe) error {
		_, ok := sqlitestore.TxFrom(c)
		res <- [2]bool{ok, c.Tx() == nil}
		return nil
	}))
	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(m); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	env, err := e.NewEnvelope("p-1", probe{K: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Stop(ctx) }()
	select {
	case r := <-res:
		if r[0] || !r[1] {
			t.Errorf("TxFrom ok %v, Tx() nil %v: want false, true", r[0], r[1])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not run")
	}
}

// handleOf presents a store.MessageTx's handle as a saga context does.
type handleOf struct{ h any }

func (c handleOf) Tx() any { return c.h }

var domainTxFeature = &storetest.DomainTx{
	Setup: func(t *testing.T, s store.Store) {
		if _, err := appDB(t, s.(*sqlitestore.Store)).Exec(`CREATE TABLE domain_rows (v TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
	},
	Insert: func(ctx context.Context, handle any, v string) error {
		tx, ok := sqlitestore.TxFrom(handleOf{handle})
		if !ok {
			return fmt.Errorf("TxFrom(%T): false", handle)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO domain_rows (v) VALUES (?)`, v)
		return err
	},
	Count: func(t *testing.T, s store.Store, v string) int {
		var n int
		if err := appDB(t, s.(*sqlitestore.Store)).QueryRow(`SELECT count(*) FROM domain_rows WHERE v = ?`, v).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	},
}

// The application's transactions and units of work that hold the writer
// for their handlers' statements compete for the file's write lock: with
// a busy timeout and immediate transactions, nothing fails, and every
// deposit published in an application transaction lands in the ledger once.
func TestPublishTxWhileHandlersHoldTheWriter(t *testing.T) {
	st := openStore(t, sqlitestore.Config{PollInterval: 10 * time.Millisecond})
	db := appDB(t, st)
	if _, err := db.Exec(enginetest.LedgerTable); err != nil {
		t.Fatal(err)
	}
	m := saga.New[enginetest.Account]("account")
	open := m.State("Open")
	dep := saga.NewEvent[enginetest.Deposit](m, func(d enginetest.Deposit) string { return d.Acct })
	apply := func(c *saga.Context[enginetest.Account], d enginetest.Deposit) error {
		tx, ok := sqlitestore.TxFrom(c)
		if !ok {
			return idem.Permanent(errors.New("no transaction"))
		}
		if _, err := tx.ExecContext(c.Context(), `INSERT INTO ledger (message_id, acct, amount) VALUES (?, ?, ?)`, c.MessageID(), d.Acct, d.Amount); err != nil {
			return err
		}
		c.Data.Balance += d.Amount
		return nil
	}
	m.Initially(saga.When(dep).Then(apply).TransitionTo(open))
	m.During(open, saga.When(dep).Then(apply))
	e := enginetest.NewEngine(t, st, st, &idem.Config{MaxAttempts: 1})
	if err := e.Register(m); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Stop(ctx) }()
	const writers, each = 4, 30
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("d-%d-%d", w, i)
				env, err := e.NewEnvelope(id, enginetest.Deposit{Acct: fmt.Sprint("a-", i%5), Amount: 1})
				if err != nil {
					t.Error(err)
					return
				}
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, id); err != nil {
					t.Error(err)
				}
				if err := sqlitestore.PublishTx(ctx, tx, env, env); err != nil { // and a duplicate
					t.Error(err)
				}
				if err := tx.Commit(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	enginetest.WaitFor(t, 60*time.Second, "every deposit applied", func() (bool, error) { return e.Stats().Applied >= writers*each, nil })
	rows, sums, err := ledger(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for id, n := range rows {
		if n != 1 {
			t.Errorf("ledger rows of %s: %d, want 1", id, n)
		}
	}
	for _, s := range sums {
		total += s
	}
	if len(rows) != writers*each || total != writers*each {
		t.Errorf("ledger: %d messages, sum %d; want %d and %d", len(rows), total, writers*each, writers*each)
	}
	if s := e.Stats(); s.DeadLettered != 0 {
		t.Errorf("stats %+v: want nothing dead-lettered", s)
	}
}

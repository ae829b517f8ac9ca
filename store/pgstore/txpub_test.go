package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/storetest"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// appConn is the application's own connection: default search_path, so
// PublishTx must name Idem's tables with the store's schema. Its orders
// table lives in the store's schema, dropped with it.
func appConn(t testing.TB, st *pgstore.Store) (*pgx.Conn, string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	orders := pgx.Identifier{st.Schema(), "orders"}.Sanitize()
	if _, err := conn.Exec(ctx, `CREATE TABLE `+orders+` (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return conn, orders
}

type seenIDs struct {
	mu  sync.Mutex
	ids map[string]int
}

func (s *seenIDs) handle(_ context.Context, env idem.Envelope) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[env.ID]++
	return nil
}

func (s *seenIDs) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

type publishFunc func(context.Context, pgx.Tx, ...transport.Envelope) error

func placeOrder(t testing.TB, conn *pgx.Conn, orders, id string, commit bool, publish publishFunc) {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO `+orders+` (id) VALUES ($1)`, id); err != nil {
		t.Fatal(err)
	}
	if err := publish(ctx, tx, transport.Envelope{ID: id, Type: "order.placed", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if commit {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Both paths: a rolled-back transaction sends nothing, a committed one
// sends exactly once.
func TestPublishTx(t *testing.T) {
	for _, broker := range []bool{false, true} {
		t.Run(fmt.Sprintf("broker=%v", broker), func(t *testing.T) {
			st := openStore(t, pgstore.Config{})
			var tr transport.Transport = st
			publish := publishFunc(st.PublishTx)
			var mt *memtransport.Transport
			if broker {
				mt = memtransport.New(nil)
				t.Cleanup(func() { _ = mt.Close() })
				tr, publish = mt, st.PublishOutboxTx
			}
			e, err := idem.NewEngine(st, tr, &idem.Config{Logger: discard})
			if err != nil {
				t.Fatal(err)
			}
			got := &seenIDs{ids: map[string]int{}}
			if err := e.Handle("order.placed", got.handle); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := e.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = e.Stop(ctx) }()
			conn, orders := appConn(t, st)
			placeOrder(t, conn, orders, "rolled-back", false, publish)
			placeOrder(t, conn, orders, "committed", true, publish)
			if broker {
				if n, err := e.RelayOutbox(ctx, 0); err != nil || n != 1 {
					t.Fatalf("relay: sent %d, %v; want 1, nil", n, err)
				}
			}
			enginetest.WaitFor(t, 10*time.Second, "the committed order's event handled", func() (bool, error) { return got.count("committed") == 1, nil })
			if broker {
				if n, err := e.RelayOutbox(ctx, 0); err != nil || n != 0 {
					t.Errorf("second relay: sent %d, %v; want 0, nil", n, err)
				}
				if p := mt.Stats().Published; p != 1 {
					t.Errorf("broker published %d, want 1", p)
				}
			}
			if s := e.Stats(); got.count("rolled-back") != 0 || s.Received != 1 {
				t.Errorf("rolled back handled %d times, %d deliveries received; want 0, 1", got.count("rolled-back"), s.Received)
			}
		})
	}
}

func TestPublishTxRefusesBadEnvelopes(t *testing.T) {
	st := openStore(t, pgstore.Config{})
	conn, _ := appConn(t, st)
	ctx := context.Background()
	for _, publish := range []publishFunc{st.PublishTx, st.PublishOutboxTx} {
		for _, env := range []transport.Envelope{{Type: "t"}, {ID: "x"}, {ID: "a\x00b", Type: "t"}, {ID: "x", Type: "t\xff"}, {ID: "x", Type: "t", CorrelationID: "\x00<script>"}} {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			err = publish(ctx, tx, env)
			_ = tx.Rollback(ctx)
			var fe *transport.FieldError
			if !errors.As(err, &fe) {
				t.Errorf("publish %q/%q: got %v, want a *transport.FieldError", env.ID, env.Type, err)
			}
		}
	}
}

// The ledger saga through the engine on PostgreSQL.
func TestDomainTxThroughEngine(t *testing.T) {
	st := openStore(t, pgstore.Config{})
	conn := schemaConn(t, st.Schema())
	ctx := context.Background()
	if _, err := conn.Exec(ctx, enginetest.LedgerTable); err != nil {
		t.Fatal(err)
	}
	enginetest.DomainTx(t, enginetest.DomainTxCase{
		Store: st, Transport: st,
		Exec: func(c *saga.Context[enginetest.Account], q string, args ...any) (bool, error) {
			tx, ok := pgstore.TxFrom(c)
			if !ok {
				return false, nil
			}
			_, err := tx.Exec(c.Context(), q, args...)
			return true, err
		},
		Ledger: func(ctx context.Context) (map[string]int, map[string]int, error) {
			rows, err := conn.Query(ctx, `SELECT message_id, acct, amount FROM ledger`)
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
		},
	})
}

// A statement that fails aborts PostgreSQL's transaction up to the
// message: even when the handler ignores the error, the message fails
// (and is dead-lettered once its attempts are used up) and nothing of it
// commits, while the other messages of its unit of work commit.
func TestDomainTxIgnoredErrorFailsTheMessage(t *testing.T) {
	st := openStore(t, pgstore.Config{})
	conn := schemaConn(t, st.Schema())
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `CREATE TABLE notes (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	type note struct {
		K, ID string
		Bad   bool
	}
	m := saga.New[struct{ N int }]("notes")
	open := m.State("Open")
	ev := saga.NewEvent[note](m, func(n note) string { return n.K })
	apply := func(c *saga.Context[struct{ N int }], n note) error {
		tx, _ := pgstore.TxFrom(c)
		_, _ = tx.Exec(c.Context(), `INSERT INTO notes (id) VALUES ($1)`, n.ID)
		if n.Bad {
			_, _ = tx.Exec(c.Context(), `SELECT 1/0`) // error ignored
		}
		c.Data.N++
		return nil
	}
	m.Initially(saga.When(ev).Then(apply).TransitionTo(open))
	m.During(open, saga.When(ev).Then(apply))
	e, err := idem.NewEngine(st, st, &idem.Config{Logger: discard, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(m); err != nil {
		t.Fatal(err)
	}
	var envs []idem.Envelope
	for i, n := range []note{{K: "k", ID: "n1"}, {K: "k2", ID: "bad", Bad: true}, {K: "k3", ID: "n3"}} {
		env, err := e.NewEnvelope(fmt.Sprint("m", i), n)
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
	}
	if err := e.Publish(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Stop(ctx) }()
	enginetest.WaitFor(t, 20*time.Second, "two applied, one dead-lettered", func() (bool, error) {
		s := e.Stats()
		return s.Applied == 2 && s.DeadLettered == 1, nil
	})
	var ids []string
	rows, err := conn.Query(ctx, `SELECT id FROM notes ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids) != "[n1 n3]" {
		t.Errorf("notes %v, want [n1 n3]: the failed message's insert must not commit", ids)
	}
}

// handleOf presents a store.MessageTx's handle as a saga context does.
type handleOf struct{ h any }

func (c handleOf) Tx() any { return c.h }

var domainTxFeature = &storetest.DomainTx{
	Setup: func(t *testing.T, s store.Store) {
		if _, err := schemaConn(t, s.(*pgstore.Store).Schema()).Exec(t.Context(), `CREATE TABLE domain_rows (v text NOT NULL)`); err != nil {
			t.Fatal(err)
		}
	},
	Insert: func(ctx context.Context, handle any, v string) error {
		tx, ok := pgstore.TxFrom(handleOf{handle})
		if !ok {
			return fmt.Errorf("TxFrom(%T): false", handle)
		}
		_, err := tx.Exec(ctx, `INSERT INTO domain_rows (v) VALUES ($1)`, v)
		return err
	},
	Count: func(t *testing.T, s store.Store, v string) int {
		var n int
		if err := schemaConn(t, s.(*pgstore.Store).Schema()).QueryRow(t.Context(), `SELECT count(*) FROM domain_rows WHERE v = $1`, v).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	},
}

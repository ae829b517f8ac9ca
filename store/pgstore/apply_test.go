package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/pgstore"
)

// gateMsg bumps the gate saga of K; Lock makes its handler hold the inbox
// table until a reader waits for it.
type gateMsg struct {
	K    string `json:"k"`
	Lock bool   `json:"lock,omitempty"`
}

type gateData struct {
	N int `json:"n"`
}

// waitingInboxReadSQL counts the sessions waiting for a lock on the inbox
// table while they run the inbox half of a Load.
const waitingInboxReadSQL = `
SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE NOT l.granted AND l.relation = 'idem_inbox'::regclass
  AND a.query LIKE '%SELECT u.saga_type, u.key, u.message_id%'`

// holdInbox locks the inbox table in c's transaction and returns once a
// Load's inbox read waits for it (watch polls, with a deadline), so that
// the transaction commits while that Load is between its instance read
// and its inbox read.
func holdInbox(c *saga.Context[gateData], watch *pgx.Conn, waited *atomic.Bool) error {
	ctx := c.Context()
	tx, ok := pgstore.TxFrom(c)
	if !ok {
		return idem.Permanent(errors.New("no transaction to share"))
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE idem_inbox IN ACCESS EXCLUSIVE MODE`); err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		var n int
		if err := watch.QueryRow(ctx, waitingInboxReadSQL).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			waited.Store(true)
			return nil
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
	return errors.New("no Load waited for the inbox lock")
}

// Apply's result is the saga as committed with the message. pgstore's Load
// reads the instances and then the inbox records, each statement with its
// own snapshot (READ COMMITTED): a commit between the two shows the
// message as seen and the saga as it was before it. The handler here makes
// that interleaving certain: it holds the inbox table until Apply's read
// waits for it, so its commit lands after Apply read the saga.
func TestApplyResultIsTheSagaAfterItsCommit(t *testing.T) {
	st := openStore(t, pgstore.Config{})
	watch := schemaConn(t, st.Schema())
	var waited atomic.Bool
	var lockOnce sync.Once
	m := saga.New[gateData]("gate")
	open := m.State("Open")
	ev := saga.NewEvent[gateMsg](m, func(g gateMsg) string { return g.K })
	bump := func(c *saga.Context[gateData], g gateMsg) error {
		var err error
		if g.Lock {
			lockOnce.Do(func() { err = holdInbox(c, watch, &waited) })
		}
		c.Data.N++
		return err
	}
	m.Initially(saga.When(ev).Then(bump).TransitionTo(open))
	m.During(open, saga.When(ev).Then(bump))
	e, err := idem.NewEngine(st, st, &idem.Config{Logger: discard, SweepInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(m); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Stop(context.Background()) }()
	apply := func(id string, g gateMsg) idem.Result {
		t.Helper()
		env, err := e.NewEnvelope(id, g)
		if err != nil {
			t.Fatal(err)
		}
		r, err := e.PublishAndWait(ctx, env)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := apply("g-1", gateMsg{K: "k"}); r.Version != 1 {
		t.Fatalf("first Apply: %+v, want version 1", r)
	}
	r := apply("g-2", gateMsg{K: "k", Lock: true})
	if !waited.Load() {
		t.Fatal("no Load waited for the inbox lock: the interleaving did not happen")
	}
	var d gateData
	if err := json.Unmarshal(r.Data, &d); err != nil {
		t.Fatal(err)
	}
	if r.Duplicate || r.Version != 2 || d.N != 2 {
		t.Fatalf("second Apply: %+v (data %+v); want the saga with the message: version 2, n 2", r, d)
	}
}

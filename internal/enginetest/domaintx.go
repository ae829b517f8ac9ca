package enginetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Account is the ledger saga's state document.
type Account struct {
	Balance int `json:"balance"`
}

// Deposit adds Amount to account Acct. Conflict makes its first run bump
// the saga's stored version inside the unit of work's own transaction, so
// the commit conflicts and the unit of work runs again. FailAfter makes
// the handler fail permanently after its ledger insert.
type Deposit struct {
	Acct      string `json:"acct"`
	Amount    int    `json:"amount"`
	Conflict  bool   `json:"conflict,omitempty"`
	FailAfter bool   `json:"fail_after,omitempty"`
}

// DomainTxCase adapts the domain-statement test to one store.
type DomainTxCase struct {
	Store     store.Store
	Transport transport.Transport
	// Exec runs one statement through the store's TxFrom(c), with the
	// store's placeholders written as $1, $2… (translated when needed); ok
	// is false when TxFrom returned false.
	Exec func(c *saga.Context[Account], sql string, args ...any) (ok bool, err error)
	// Ledger returns how many ledger rows each message ID has, and the sum
	// of the amounts of each account.
	Ledger func(ctx context.Context) (rows map[string]int, sums map[string]int, err error)
}

// LedgerTable is the ledger's schema: deliberately without a unique
// constraint, so that an insert that ran twice shows as two rows.
const LedgerTable = `CREATE TABLE ledger (message_id TEXT NOT NULL, acct TEXT NOT NULL, amount INTEGER NOT NULL)`

// DomainTx runs the ledger saga, whose handler inserts a ledger row in the
// unit of work's transaction, through an engine on c.Store: every deposit
// published three times, one conflict injected per account, one deposit
// per account that fails after its insert. It checks that each applied
// deposit has exactly one ledger row, that the failed ones have none, and
// that each account's balance equals its ledger's sum.
func DomainTx(t *testing.T, c DomainTxCase) {
	t.Helper()
	var mu sync.Mutex
	bumped := map[string]bool{}
	m := saga.New[Account]("account")
	open := m.State("Open")
	dep := saga.NewEvent[Deposit](m, func(d Deposit) string { return d.Acct })
	apply := func(sc *saga.Context[Account], d Deposit) error {
		mu.Lock()
		bump := d.Conflict && !bumped[sc.MessageID()]
		bumped[sc.MessageID()] = true
		mu.Unlock()
		if bump {
			if _, err := c.Exec(sc, `UPDATE idem_instances SET version = version + 1 WHERE saga_type = 'account' AND key = $1`, sc.Key()); err != nil {
				return err
			}
		}
		ok, err := c.Exec(sc, `INSERT INTO ledger (message_id, acct, amount) VALUES ($1, $2, $3)`, sc.MessageID(), d.Acct, d.Amount)
		if err != nil {
			return err
		}
		if !ok {
			return idem.Permanent(errors.New("the store shares no transaction"))
		}
		if d.FailAfter {
			return idem.Permanent(errors.New("failed after the insert"))
		}
		sc.Data.Balance += d.Amount
		return nil
	}
	m.Initially(saga.When(dep).Then(apply).TransitionTo(open))
	m.During(open, saga.When(dep).Then(apply))

	e := NewEngine(t, c.Store, c.Transport, &idem.Config{BatchSize: 32, Lanes: 2})
	if err := e.Register(m); err != nil {
		t.Fatal(err)
	}
	const accts, per = 4, 6
	var envs []idem.Envelope
	applied := map[string]bool{}
	for i := range per {
		for a := range accts {
			d := Deposit{Acct: fmt.Sprintf("a-%d", a), Amount: i + 1, Conflict: i == 2, FailAfter: i == 4}
			id := fmt.Sprintf("dep-%d-%d", a, i)
			env, err := e.NewEnvelope(id, d)
			if err != nil {
				t.Fatal(err)
			}
			applied[id] = !d.FailAfter
			envs = append(envs, env, env, env)
		}
	}
	ctx := context.Background()
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The first deposits create the sagas, so that the bumps find them.
	first := accts * 3
	if err := e.Publish(ctx, envs[:first]...); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 30*time.Second, "the accounts created", func() (bool, error) { return e.Stats().Applied >= accts, nil })
	if err := e.Publish(ctx, envs[first:]...); err != nil {
		t.Fatal(err)
	}
	want := int64(accts * per)
	WaitFor(t, 30*time.Second, "every deposit applied or dead-lettered", func() (bool, error) {
		s := e.Stats()
		return s.Applied+s.DeadLettered >= want, nil
	})
	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.Stop(stop); err != nil {
		t.Fatal(err)
	}
	if s := e.Stats(); s.Conflicts == 0 {
		t.Errorf("stats %+v: want the injected conflicts counted", s)
	}
	rows, sums, err := c.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id, ok := range applied {
		if wantRows := map[bool]int{true: 1, false: 0}[ok]; rows[id] != wantRows {
			t.Errorf("ledger rows of %s: got %d, want %d (applied: %v)", id, rows[id], wantRows, ok)
		}
	}
	uow, err := c.Store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	var keys []store.Key
	for a := range accts {
		keys = append(keys, store.Key{SagaType: "account", Key: fmt.Sprintf("a-%d", a)})
	}
	loaded, err := uow.Load(ctx, &store.LoadParams{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		in := loaded.Instances[k]
		if in == nil {
			t.Errorf("account %s: no saga", k.Key)
			continue
		}
		var acct Account
		if err := json.Unmarshal(in.Data, &acct); err != nil {
			t.Fatal(err)
		}
		if acct.Balance != sums[k.Key] || acct.Balance == 0 {
			t.Errorf("account %s: balance %d, ledger sum %d: want equal and non-zero", k.Key, acct.Balance, sums[k.Key])
		}
	}
}

// DomainTxThroughput applies n deposits over 64 accounts through an
// engine on st (its own queue) and returns how long they took; with exec
// set, each handler inserts a ledger row through it.
func DomainTxThroughput(b testing.TB, st store.Queue, n int, exec func(c *saga.Context[Account], sql string, args ...any) (bool, error)) time.Duration {
	b.Helper()
	m := saga.New[Account]("account")
	open := m.State("Open")
	dep := saga.NewEvent[Deposit](m, func(d Deposit) string { return d.Acct })
	apply := func(sc *saga.Context[Account], d Deposit) error {
		if exec != nil {
			if _, err := exec(sc, `INSERT INTO ledger (message_id, acct, amount) VALUES ($1, $2, $3)`, sc.MessageID(), d.Acct, d.Amount); err != nil {
				return err
			}
		}
		sc.Data.Balance += d.Amount
		return nil
	}
	m.Initially(saga.When(dep).Then(apply).TransitionTo(open))
	m.During(open, saga.When(dep).Then(apply))
	e := NewEngine(b, st, st, nil)
	if err := e.Register(m); err != nil {
		b.Fatal(err)
	}
	envs := make([]idem.Envelope, n)
	for i := range envs {
		env, err := e.NewEnvelope(fmt.Sprint("dep-", i), Deposit{Acct: fmt.Sprint("a-", i%64), Amount: 1})
		if err != nil {
			b.Fatal(err)
		}
		envs[i] = env
	}
	ctx := context.Background()
	for start := 0; start < n; start += 500 {
		if err := e.Publish(ctx, envs[start:min(start+500, n)]...); err != nil {
			b.Fatal(err)
		}
	}
	began := time.Now()
	if err := e.Start(ctx); err != nil {
		b.Fatal(err)
	}
	WaitFor(b, 5*time.Minute, "every deposit applied", func() (bool, error) { return e.Stats().Applied >= int64(n), nil })
	took := time.Since(began)
	if err := e.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	return took
}

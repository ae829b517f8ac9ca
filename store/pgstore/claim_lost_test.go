package pgstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// dyingClaims is st as store and queue whose units of work die with their
// transaction whenever they claimed: Commit and Lease fail as when the
// server ends the session (idle_in_transaction_session_timeout, a lost
// connection). The claim then goes with the transaction, the rows come
// back untouched, and only Receive can count an attempt.
type dyingClaims struct {
	*pgstore.Store
	claims atomic.Int64
}

func (d *dyingClaims) Begin(ctx context.Context) (store.UnitOfWork, error) {
	u, err := d.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &dyingUnit{ClaimUnitOfWork: u.(store.ClaimUnitOfWork), d: d}, nil
}

type dyingUnit struct {
	store.ClaimUnitOfWork
	d       *dyingClaims
	claimed bool
}

var errSessionEnded = errors.New("test: the server ended the session")

func (u *dyingUnit) Claim(ctx context.Context, n, part, parts int) ([]transport.Delivery, error) {
	ds, err := u.ClaimUnitOfWork.Claim(ctx, n, part, parts)
	if len(ds) > 0 {
		u.claimed = true
		u.d.claims.Add(1)
	}
	return ds, err
}

func (u *dyingUnit) Commit(ctx context.Context, c *store.Changes) error {
	if u.claimed {
		_ = u.ClaimUnitOfWork.Rollback(ctx)
		return errSessionEnded
	}
	return u.ClaimUnitOfWork.Commit(ctx, c)
}

func (u *dyingUnit) Lease(context.Context) ([]transport.Delivery, error) {
	return nil, errSessionEnded
}

// A claimed batch that dies with its transaction goes to Receive next,
// which leases it and counts its attempt: claiming the same rows again at
// once would loop on them forever, no attempt ever counted.
func TestClaimedBatchLostGoesToReceive(t *testing.T) {
	t.Parallel()
	st := openStore(t, pgstore.Config{Lease: 5 * time.Second})
	d := &dyingClaims{Store: st}
	divertAdded(t, st)
	e := enginetest.NewSagaEngine(t, d, d, &idem.Config{BatchSize: 8, Lanes: 1, Consumers: 1})
	const keys, perKey = 8, 4
	want := enginetest.Workload(t, []*idem.Engine{e}, keys, perKey, 1)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	conn := schemaConn(t, st.Schema())
	enginetest.WaitSettled(t, enginetest.Rows(conn), 60*time.Second)
	stopEngine(t, e)
	enginetest.CheckSagasExactlyOnce(t, st, enginetest.Rows(conn), want, perKey)
	if n := d.claims.Load(); n == 0 || n > int64(keys*perKey) {
		t.Errorf("%d batches claimed (each died); want some, and at most one per delivery", n)
	}
}

package idem_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// sweepRig is an engine on a memstore whose clock stands still at now,
// for the sweeper's tests.
type sweepRig struct {
	ctx context.Context
	st  *memstore.Store
	e   *idem.Engine
	now time.Time
}

// newSweepRig starts a rig with cfg (its Clock set to the rig's) and a
// SweepBatch of 1, so that every sweep runs several batches.
func newSweepRig(t *testing.T, cfg idem.Config) *sweepRig {
	t.Helper()
	r := &sweepRig{ctx: context.Background(), st: memstore.New(nil), now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	t.Cleanup(func() { _ = r.st.Close() })
	tr := memtransport.New(nil)
	t.Cleanup(func() { _ = tr.Close() })
	cfg.Clock, cfg.SweepBatch = func() time.Time { return r.now }, 1
	e, err := idem.NewEngine(r.st, tr, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.e = e
	return r
}

// sweep runs one sweep pass and fails the test on an error.
func (r *sweepRig) sweep(t *testing.T) {
	t.Helper()
	if _, err := r.e.Sweep(r.ctx); err != nil {
		t.Fatalf("sweep: got error %v, want nil", err)
	}
}

// The sweeper deletes the dedup tokens nobody claimed within
// Config.TokenRetention, in batches of Config.SweepBatch, and keeps the
// younger ones, and those of dead-lettered messages, even when these are
// older than every token it deletes.
func TestSweepDeletesUnclaimedTokensPastRetention(t *testing.T) {
	r := newSweepRig(t, idem.Config{TokenRetention: 24 * time.Hour})
	ctx, st, now := r.ctx, r.st, r.now
	kept := store.Token{ID: "t\x1fdead-1", MintedAt: now.Add(-72 * time.Hour)}
	old := []store.Token{
		{ID: "t\x1fold-1", MintedAt: now.Add(-48 * time.Hour)},
		{ID: "t\x1fold-2", MintedAt: now.Add(-25 * time.Hour)},
		{ID: "t\x1fold-3", MintedAt: now.Add(-24*time.Hour - time.Microsecond)},
	}
	young := store.Token{ID: "t\x1fyoung", MintedAt: now.Add(-23 * time.Hour)}
	if err := st.MintTokens(ctx, append(old, young, kept)); err != nil {
		t.Fatal(err)
	}
	commitChanges(t, st, &store.Changes{DeadLetters: []store.DeadLetter{{ID: "dead-1", Envelope: transport.Envelope{ID: "dead-1", Type: "t", Body: []byte(`{}`)},
		Reason: idem.ReasonPermanent, Error: "boom", Attempts: 1, FirstFailedAt: now, LastFailedAt: now}}})
	r.sweep(t)
	n, err := st.CountTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("after a sweep with a 24h token retention: %d tokens left, want 2 (the one minted 23h ago, and the dead letter's)", n)
	}
	left, err := st.CountStaleTokens(ctx, &store.StaleTokens{MintedBefore: now.Add(-23*time.Hour + time.Second), Limit: 10})
	if err != nil || left != 1 {
		t.Fatalf("tokens minted 23h ago or earlier, not dead-lettered: got %d, %v; want the young one only", left, err)
	}
}

func commitChanges(t *testing.T, st store.Store, c *store.Changes) {
	t.Helper()
	uow, err := st.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = uow.Rollback(context.Background()) }()
	if err := uow.Commit(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// TokenRetention defaults to 30 days, and a negative one is refused by
// name.
func TestTokenRetentionConfig(t *testing.T) {
	st := memstore.New(nil)
	defer st.Close()
	tr := memtransport.New(nil)
	defer tr.Close()
	_, err := idem.NewEngine(st, tr, &idem.Config{TokenRetention: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "TokenRetention") {
		t.Fatalf("negative TokenRetention: got error %v, want one naming Config.TokenRetention", err)
	}
	if got := idem.DefaultTokenRetention; got != 30*24*time.Hour {
		t.Fatalf("DefaultTokenRetention: got %v, want 30 days", got)
	}
}

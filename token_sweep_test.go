package idem_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// The sweeper deletes the dedup tokens nobody claimed within
// Config.TokenRetention, in batches of Config.SweepBatch, and keeps the
// younger ones.
func TestSweepDeletesUnclaimedTokensPastRetention(t *testing.T) {
	ctx := context.Background()
	st := memstore.New(nil)
	defer st.Close()
	tr := memtransport.New(nil)
	defer tr.Close()
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	e, err := idem.NewEngine(st, tr, &idem.Config{Clock: func() time.Time { return now }, TokenRetention: 24 * time.Hour, SweepBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	old := []store.Token{
		{ID: "t\x1fold-1", MintedAt: now.Add(-48 * time.Hour)},
		{ID: "t\x1fold-2", MintedAt: now.Add(-25 * time.Hour)},
		{ID: "t\x1fold-3", MintedAt: now.Add(-24*time.Hour - time.Microsecond)},
	}
	young := store.Token{ID: "t\x1fyoung", MintedAt: now.Add(-23 * time.Hour)}
	if err := st.MintTokens(ctx, append(old, young)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Sweep(ctx); err != nil {
		t.Fatalf("sweep: got error %v, want nil", err)
	}
	n, err := st.CountTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("after a sweep with a 24h token retention: %d tokens left, want 1 (the one minted 23h ago)", n)
	}
	left, err := st.CountStaleTokens(ctx, &store.StaleTokens{MintedBefore: now.Add(-23*time.Hour + time.Second), Limit: 10})
	if err != nil || left != 1 {
		t.Fatalf("tokens minted 23h ago or earlier: got %d, %v; want the young one only", left, err)
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

package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

func needTokens(f Features) string {
	if !f.Tokens {
		return "Features.Tokens is false: the store keeps no dedup tokens"
	}
	return ""
}

// Token IDs as the engine forms them: a message type, U+001F, a dedup ID
// (here with a non-ASCII character).
const (
	tokenA = "orders.Placed\x1fm-1"
	tokenB = "orders.Placed\x1fm-2-é"
	tokenC = "orders.Placed\x1fm-3"
)

func loadTokens(t *testing.T, s store.Store, ids ...string) map[string]bool {
	t.Helper()
	return load(t, s, &store.LoadParams{Tokens: ids}).Tokens
}

func countTokens(t *testing.T, s store.Store) int {
	t.Helper()
	n, err := s.(store.TokenStore).CountTokens(t.Context())
	if err != nil {
		t.Fatalf("count tokens: got error %v, want nil", err)
	}
	return n
}

// Tokens minted in a commit are loaded; a token claimed in a commit is gone,
// and the inbox record of the same commit is there; minting an existing
// token again is not an error.
func testTokensMintLoadClaim(t *testing.T, s store.Store, _ Features) {
	at := now()
	commit(t, s, &store.Changes{MintTokens: []store.Token{{ID: tokenA, MintedAt: at}, {ID: tokenB, MintedAt: at}}})
	got := loadTokens(t, s, tokenA, tokenB, tokenC)
	if !got[tokenA] || !got[tokenB] || got[tokenC] {
		t.Fatalf("after minting A and B: loaded tokens %v, want A and B only", got)
	}
	ik := store.InboxKey{SagaType: "order", Key: "k1", MessageID: tokenA}
	commit(t, s, &store.Changes{
		ClaimTokens: []string{tokenA},
		Inbox:       []store.InboxEntry{{InboxKey: ik, ProcessedAt: at}},
		MintTokens:  []store.Token{{ID: tokenB, MintedAt: at.Add(time.Hour)}},
	})
	res := load(t, s, &store.LoadParams{Tokens: []string{tokenA, tokenB}, Inbox: []store.InboxKey{ik}})
	if res.Tokens[tokenA] || !res.Tokens[tokenB] || !res.Seen[ik] {
		t.Fatalf("after claiming A with an inbox record: tokens %v, inbox seen %v; want only B, and the record", res.Tokens, res.Seen[ik])
	}
	if n := countTokens(t, s); n != 1 {
		t.Fatalf("CountTokens: got %d, want 1 (B)", n)
	}
}

// Two units of work load the same token; the second claim fails with
// ErrConflict and none of its writes land.
func testTokensClaimOfClaimedConflicts(t *testing.T, s store.Store, _ Features) {
	at := now()
	commit(t, s, &store.Changes{MintTokens: []store.Token{{ID: tokenA, MintedAt: at}}})
	first, second := begin(t, s), begin(t, s)
	defer first.Rollback(t.Context())
	defer second.Rollback(t.Context())
	for i, u := range []store.UnitOfWork{first, second} {
		if r := loadIn(t, u, &store.LoadParams{Tokens: []string{tokenA}}); !r.Tokens[tokenA] {
			t.Fatalf("unit of work %d: token not loaded, want it", i+1)
		}
	}
	if err := first.Commit(t.Context(), &store.Changes{ClaimTokens: []string{tokenA}}); err != nil {
		t.Fatalf("first claim: got error %v, want nil", err)
	}
	lost := store.InboxKey{SagaType: "order", Key: "k1", MessageID: "lost"}
	err := second.Commit(t.Context(), &store.Changes{ClaimTokens: []string{tokenA}, Inbox: []store.InboxEntry{{InboxKey: lost, ProcessedAt: at}}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second claim of one token: got error %v, want one wrapping store.ErrConflict", err)
	}
	if load(t, s, &store.LoadParams{Inbox: []store.InboxKey{lost}}).Seen[lost] {
		t.Fatal("the failed claim's inbox record was committed, want nothing of that unit of work")
	}
}

// MintTokens stores tokens outside a unit of work, idempotently.
func testTokensMintOutsideUnitOfWork(t *testing.T, s store.Store, _ Features) {
	ts := s.(store.TokenStore)
	at := now()
	for range 2 {
		if err := ts.MintTokens(t.Context(), []store.Token{{ID: tokenA, MintedAt: at}, {ID: tokenC, MintedAt: at}}); err != nil {
			t.Fatalf("MintTokens: got error %v, want nil", err)
		}
	}
	if got := loadTokens(t, s, tokenA, tokenB, tokenC); !got[tokenA] || got[tokenB] || !got[tokenC] {
		t.Fatalf("loaded tokens %v, want A and C", got)
	}
	if n := countTokens(t, s); n != 2 {
		t.Fatalf("CountTokens: got %d, want 2", n)
	}
}

// Sweep never deletes tokens by age, whatever its parameters.
func testTokensSurviveSweep(t *testing.T, s store.Store, _ Features) {
	old := now().Add(-365 * 24 * time.Hour)
	commit(t, s, &store.Changes{MintTokens: []store.Token{{ID: tokenA, MintedAt: old}}})
	future := now().Add(365 * 24 * time.Hour)
	if _, err := s.Sweep(t.Context(), &store.SweepParams{FinishedBefore: future, InboxBefore: future, SentBefore: future, Limit: 1000}); err != nil {
		t.Fatalf("sweep: got error %v, want nil", err)
	}
	if !loadTokens(t, s, tokenA)[tokenA] {
		t.Fatal("a year-old token is gone after a sweep, want it kept: tokens have no retention window")
	}
}

func staleTokens(t *testing.T, s store.Store) store.TokenSweeper {
	t.Helper()
	ts, ok := s.(store.TokenSweeper)
	if !ok {
		t.Fatalf("%T keeps tokens but is not a store.TokenSweeper: want unclaimed tokens counted and swept by age", s)
	}
	return ts
}

// CountStaleTokens counts the tokens minted before a time, up to its
// bound; SweepTokens deletes them oldest first, at most its limit at a
// time, and leaves younger tokens, and a token minted exactly at the time,
// alone.
func testTokensSweepByAge(t *testing.T, s store.Store, _ Features) {
	ts := staleTokens(t, s)
	at := now()
	mint := []store.Token{{ID: tokenB, MintedAt: at.Add(-2 * time.Hour)}, {ID: tokenA, MintedAt: at.Add(-3 * time.Hour)}, {ID: tokenC, MintedAt: at.Add(-time.Hour)}}
	commit(t, s, &store.Changes{MintTokens: mint})
	cutoff := at.Add(-time.Hour) // C is minted exactly then: not before it
	count := func(p store.StaleTokens) int {
		t.Helper()
		n, err := ts.CountStaleTokens(t.Context(), &p)
		if err != nil {
			t.Fatalf("CountStaleTokens(%+v): got error %v, want nil", p, err)
		}
		return n
	}
	sweep := func(limit int) int {
		t.Helper()
		r, err := ts.SweepTokens(t.Context(), &store.StaleTokens{MintedBefore: cutoff, Limit: limit})
		if err != nil {
			t.Fatalf("SweepTokens(limit %d): got error %v, want nil", limit, err)
		}
		return r.Deleted
	}
	if n := count(store.StaleTokens{MintedBefore: cutoff, Limit: 10}); n != 2 {
		t.Fatalf("CountStaleTokens before the cutoff: got %d, want 2 (A and B; C is minted at it)", n)
	}
	if n := count(store.StaleTokens{MintedBefore: cutoff, Limit: 1}); n != 1 {
		t.Fatalf("CountStaleTokens with Limit 1: got %d, want 1 (the bound)", n)
	}
	if n := count(store.StaleTokens{Limit: 10}); n != 0 {
		t.Fatalf("CountStaleTokens with a zero MintedBefore: got %d, want 0", n)
	}
	if n := sweep(1); n != 1 {
		t.Fatalf("first SweepTokens(limit 1): deleted %d, want 1", n)
	}
	if got := loadTokens(t, s, tokenA, tokenB, tokenC); got[tokenA] || !got[tokenB] || !got[tokenC] {
		t.Fatalf("after sweeping one token: loaded %v, want B and C (the oldest, A, deleted first)", got)
	}
	if n := sweep(10); n != 1 {
		t.Fatalf("second SweepTokens: deleted %d, want 1 (B)", n)
	}
	if n := sweep(10); n != 0 {
		t.Fatalf("third SweepTokens: deleted %d, want 0", n)
	}
	if got := loadTokens(t, s, tokenA, tokenB, tokenC); got[tokenA] || got[tokenB] || !got[tokenC] {
		t.Fatalf("after the sweeps: loaded %v, want C only", got)
	}
	if r, err := ts.SweepTokens(t.Context(), &store.StaleTokens{Limit: 10}); err != nil || r.Deleted != 0 || r.Read != 0 || r.Next != nil {
		t.Fatalf("SweepTokens with a zero MintedBefore: got %+v, %v; want nothing read, nil", r, err)
	}
}

// A limit that is not positive, or no parameters, is an error that names
// the limit; nothing is deleted.
func testTokensSweepBadInput(t *testing.T, s store.Store, _ Features) {
	ts := staleTokens(t, s)
	commit(t, s, &store.Changes{MintTokens: []store.Token{{ID: tokenA, MintedAt: now().Add(-time.Hour)}}})
	for _, p := range []*store.StaleTokens{nil, {MintedBefore: now(), Limit: 0}, {MintedBefore: now(), Limit: -1}} {
		if _, err := ts.SweepTokens(t.Context(), p); err == nil {
			t.Errorf("SweepTokens(%+v): got nil error, want one naming the limit", p)
		} else if p != nil && !strings.Contains(err.Error(), "Limit") {
			t.Errorf("SweepTokens(%+v): error %q does not name Limit", p, err)
		}
		if _, err := ts.CountStaleTokens(t.Context(), p); err == nil {
			t.Errorf("CountStaleTokens(%+v): got nil error, want one naming the limit", p)
		}
	}
	if !loadTokens(t, s, tokenA)[tokenA] {
		t.Fatal("a refused sweep deleted a token")
	}
}

// A token whose message has a dead letter is neither counted nor swept,
// however old: replaying the dead letter needs it (without it the replay
// would be skipped as a duplicate). Once the dead letter is gone, it is.
func testTokensOfDeadLettersKept(t *testing.T, s store.Store, _ Features) {
	ts := staleTokens(t, s)
	at := now()
	dead, live := "orders.Placed"+store.TokenSep+"m-dead", "orders.Placed"+store.TokenSep+"m-lost"
	commit(t, s, &store.Changes{
		MintTokens: []store.Token{{ID: dead, MintedAt: at.Add(-2 * time.Hour)}, {ID: live, MintedAt: at.Add(-2 * time.Hour)}},
		DeadLetters: []store.DeadLetter{{ID: "m-dead", Envelope: transport.Envelope{ID: "m-dead", Type: "orders.Placed", Body: []byte(`{}`)},
			Reason: "permanent_error", Error: "boom", Attempts: 1, FirstFailedAt: at, LastFailedAt: at}},
	})
	p := store.StaleTokens{MintedBefore: at.Add(-time.Hour), Limit: 10}
	if n, err := ts.CountStaleTokens(t.Context(), &p); err != nil || n != 1 {
		t.Errorf("CountStaleTokens: got %d, %v; want 1 (the dead-lettered message's token is not stale)", n, err)
	}
	if r, err := ts.SweepTokens(t.Context(), &p); err != nil || r.Deleted != 1 {
		t.Fatalf("SweepTokens: got %+v, %v; want 1 deleted", r, err)
	}
	if got := loadTokens(t, s, dead, live); !got[dead] || got[live] {
		t.Fatalf("tokens after the sweep: %v; want the dead letter's kept and the other swept", got)
	}
	if _, err := s.DeleteDeadLetters(t.Context(), []string{"m-dead"}); err != nil {
		t.Fatal(err)
	}
	if r, err := ts.SweepTokens(t.Context(), &p); err != nil || r.Deleted != 1 {
		t.Errorf("SweepTokens once the dead letter is purged: got %+v, %v; want 1 deleted", r, err)
	}
}

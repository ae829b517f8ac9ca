package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

func init() {
	featureCases = append(featureCases, featureCase{"TokensSweepCursor", needTokens, testTokensSweepCursor})
}

// testTokensSweepCursor: a sweep pass that carries each batch's cursor
// into the next deletes every sweepable token and reads each token once:
// the tokens it keeps (their message has a dead letter), older than the
// sweepable ones, are not read again by every batch.
func testTokensSweepCursor(t *testing.T, s store.Store, _ Features) {
	ts := staleTokens(t, s)
	at := now().Add(-time.Hour)
	var ch store.Changes
	for i := range 5 { // kept: older than every sweepable token
		id := fmt.Sprintf("m-kept-%d", i)
		ch.MintTokens = append(ch.MintTokens, store.Token{ID: "orders.Placed" + store.TokenSep + id, MintedAt: at.Add(time.Duration(i) * time.Second)})
		ch.DeadLetters = append(ch.DeadLetters, store.DeadLetter{ID: id, Envelope: transport.Envelope{ID: id, Type: "orders.Placed", Body: []byte(`{}`)},
			Reason: "permanent_error", Error: "boom", Attempts: 1, FirstFailedAt: at, LastFailedAt: at})
	}
	for i := range 3 { // sweepable, two minted at the same instant
		ch.MintTokens = append(ch.MintTokens, store.Token{ID: fmt.Sprintf("orders.Placed%sm-lost-%d", store.TokenSep, i), MintedAt: at.Add(time.Minute + time.Duration(i/2)*time.Second)})
	}
	commit(t, s, &ch)
	p := &store.StaleTokens{MintedBefore: at.Add(10 * time.Minute), Limit: 2}
	deleted, read, batches := 0, 0, 0
	for {
		r, err := ts.SweepTokens(t.Context(), p)
		if err != nil {
			t.Fatalf("SweepTokens(%+v): got error %v, want nil", p, err)
		}
		batches++
		deleted, read = deleted+r.Deleted, read+r.Read
		if r.Read > p.Limit || r.Deleted > r.Read {
			t.Fatalf("batch %d: read %d and deleted %d with Limit %d; want read <= Limit and deleted <= read", batches, r.Read, r.Deleted, p.Limit)
		}
		if r.Next == nil {
			break
		}
		if batches > 8 {
			t.Fatalf("%d batches over 8 tokens with Limit 2: the cursor does not advance (last %+v)", batches, r.Next)
		}
		p.After = r.Next
	}
	if deleted != 3 {
		t.Errorf("the pass deleted %d tokens, want 3 (every token whose message has no dead letter)", deleted)
	}
	if read != 8 {
		t.Errorf("the pass read %d tokens in %d batches, want 8: each token once, the 5 kept ones not again by every batch", read, batches)
	}
	if n := countTokens(t, s); n != 5 {
		t.Errorf("%d tokens left, want the 5 kept", n)
	}
}

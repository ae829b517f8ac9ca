package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginestats"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// A duplicate delivered after the retention sweep is recognised under the
// token inbox and applied again under the retention inbox.
func TestLateDuplicateTokenInbox(t *testing.T) {
	enginetest.LateDuplicate(t, func(t *testing.T) store.Queue {
		return openStore(t, pgstore.Config{})
	})
}

// Two engines with separate pools share one schema under DedupToken: every
// event the counter sagas emit carries a token, the consumers (on either
// engine, racing for the same copies) claim each exactly once, and the
// workload stays exactly-once with no token left.
func TestEnginesShareTokens(t *testing.T) {
	testenv.PostgresURL(t)
	first := openStore(t, pgstore.Config{Lease: 5 * time.Second})
	schema := first.Schema()
	var engines []*idem.Engine
	for i := range 2 {
		st := first
		if i > 0 {
			var err error
			st, err = pgstore.Open(context.Background(), testenv.PostgresURL(t), &pgstore.Config{Schema: schema, Lease: 5 * time.Second, MaxConns: 8})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
		}
		engines = append(engines, newEngine(t, st, &idem.Config{BatchSize: 16, Lanes: 2, Dedup: idem.DedupToken}))
	}
	const keys, perKey = 20, 4
	want := enginetest.Workload(t, engines[:1], keys, perKey, 2)
	for _, e := range engines {
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	conn := schemaConn(t, schema)
	enginetest.WaitSettled(t, enginetest.Rows(conn), 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, e := range engines {
		if err := e.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.CheckExactlyOnce(t, first, enginetest.Rows(conn), want, perKey)
	if n, err := first.CountTokens(ctx); err != nil || n != 0 {
		t.Fatalf("tokens left: %d (%v), want 0: every emitted event's token claimed by its consumer", n, err)
	}
	if s := enginestats.Sum(engines...); s.Emitted != int64(keys*perKey) {
		t.Fatalf("emitted %d events, want %d (one token each)", s.Emitted, keys*perKey)
	}
}

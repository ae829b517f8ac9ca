package pgstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// The indexes of fair receives are built by the first fair receive, and
// only then: a queue that never receives in fair order pays nothing for
// them on its writes.
func TestFairReceiveBuildsItsIndexes(t *testing.T) {
	s := openStore(t, pgstore.Config{})
	indexes := func() []string {
		rows, err := schemaConn(t, s.Schema()).Query(context.Background(), `SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'idem_queue'`, s.Schema())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			out = append(out, n)
		}
		return out
	}
	receive := func(fair bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if _, err := s.ReceiveAdmitted(ctx, &store.ReceiveParams{Max: 1, Fair: fair}); err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
	}
	receive(false)
	if got := indexes(); slices.Contains(got, "idem_queue_fair") || slices.Contains(got, "idem_queue_part") {
		t.Fatalf("after a plain admitting receive the queue has %v, want no fair index", got)
	}
	receive(true)
	if got := indexes(); !slices.Contains(got, "idem_queue_fair") || !slices.Contains(got, "idem_queue_part") {
		t.Fatalf("after a fair receive the queue has %v, want idem_queue_fair and idem_queue_part", got)
	}
}

package pgstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// BenchmarkCounterSweep measures one sweep pass (batches of 1,000 until
// none is left) over 100,000 counters of a keyed rate limit, one per
// tenant, whose buckets are full again: every one is deleted. One op is
// one pass; the counters are made again between passes, untimed.
func BenchmarkCounterSweep(b *testing.B) {
	const tenants, batch = 100_000, 1000
	st := openStore(b, pgstore.Config{})
	ctx := context.Background()
	l := store.Limit{Name: "api", Rate: 1e6, Burst: 1}
	if err := st.DeclareLimits(ctx, []store.Limit{l}); err != nil {
		b.Fatal(err)
	}
	lim := map[string]store.Limit{"api": l}
	for n := range b.N {
		b.StopTimer()
		for lo := 0; lo < tenants; lo += 10_000 {
			reqs := make([]store.AdmitRequest, 0, 10_000)
			for i := lo; i < lo+10_000; i++ {
				reqs = append(reqs, store.AdmitRequest{Holder: "h", Keys: []store.LimitKey{{Name: "api", Key: "tenant-" + strconv.Itoa(i)}}})
			}
			if _, err := st.Admit(ctx, &store.AdmitParams{Limits: lim, Requests: reqs, TTL: time.Minute}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		p := &store.CounterSweepParams{Limit: batch}
		deleted := 0
		for {
			r, err := st.SweepCounters(ctx, p)
			if err != nil {
				b.Fatal(err)
			}
			deleted += r.Counters
			if p.After = r.Next; r.Next == nil {
				break
			}
		}
		if deleted != tenants {
			b.Fatalf("pass %d deleted %d counters, want %d", n, deleted, tenants)
		}
	}
}

package idem_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// The sweeper deletes the flow-control counters that no decision needs
// (store.Limiter.SweepCounters): a tenant's counter whose bucket is full
// again and that has been idle for Config.LimitCounterIdle is gone after
// a sweep, and one whose bucket is still partial is kept, with its state.
func TestSweepDeletesIdleFullLimitCounters(t *testing.T) {
	r := newSweepRig(t, idem.Config{LimitCounterIdle: time.Nanosecond})
	st := r.st
	fast := store.Limit{Name: "fast", Rate: 1000, Burst: 1}
	slow := store.Limit{Name: "slow", Rate: 0.001, Burst: 2}
	lim := map[string]store.Limit{"fast": fast, "slow": slow}
	for _, l := range lim {
		if err := st.DeclareLimits(r.ctx, []store.Limit{l}); err != nil {
			t.Fatal(err)
		}
	}
	var reqs []store.AdmitRequest
	for _, k := range []string{"acme", "globex", "initech"} {
		reqs = append(reqs, store.AdmitRequest{Holder: "h-" + k, Keys: []store.LimitKey{{Name: "fast", Key: k}}})
	}
	reqs = append(reqs, store.AdmitRequest{Holder: "h-slow", Keys: []store.LimitKey{{Name: "slow", Key: "acme"}}})
	if _, err := st.Admit(r.ctx, &store.AdmitParams{Limits: lim, Requests: reqs, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.sweep(t)
		uses, err := st.LimitUses(r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(uses) == 1 && uses[0].LimitKey == (store.LimitKey{Name: "slow", Key: "acme"}) {
			if uses[0].Tokens < 1-1e-3 || uses[0].Tokens > 1.5 {
				t.Fatalf("slow/acme after the sweep: got %+v, want its 1 token left", uses[0])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("counters after sweeps for 10s: got %+v, want slow/acme's partial bucket only", uses)
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
}

package idem

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// The gate's plans: each key's entries are a prefix of its waiting
// deliveries, a later request of a key rides in one plan with an earlier
// one only when it needs all that one needs, a refusal blocks its key
// (even a later delivery that needs nothing), and other keys pass.
func TestGatePlansKeepKeyOrder(t *testing.T) {
	api, db := store.LimitKey{Name: "api"}, store.LimitKey{Name: "db"}
	w := func(id, key string, needs ...store.LimitKey) *waiter {
		return &waiter{d: transport.Delivery{Token: id, Envelope: transport.Envelope{ID: id}}, key: key, needs: needs, holder: "h-" + id}
	}
	for _, tc := range []struct {
		name    string
		ws      []*waiter
		max     int
		refuse  map[string]bool // holders the store refuses
		want    []string        // admitted, in order
		plans   int             // Admit calls
		refused time.Duration
	}{
		{"free deliveries pass", []*waiter{w("a", "k1"), w("b", "k2")}, 8, nil, []string{"a", "b"}, 0, 0},
		{"a refused head blocks its key, not others",
			[]*waiter{w("a", "k1", api), w("b", "k1"), w("c", "k2", api), w("d", "k1", api)}, 8,
			map[string]bool{"h-a": true, "h-d": true}, []string{"c"}, 1, 0},
		{"a later request needing less waits for the next plan",
			[]*waiter{w("a", "k1", api, db), w("b", "k1", api), w("c", "k2")}, 8,
			nil, []string{"a", "c", "b"}, 2, 0},
		{"a refused head does not hide what is behind it",
			[]*waiter{w("a", "k1", api), w("b", "k2", api), w("c", "k3", api)}, 1,
			map[string]bool{"h-a": true, "h-b": true}, []string{"c"}, 3, time.Second},
		{"at most max", []*waiter{w("a", "k1", api), w("b", "k2", api), w("c", "k3", api)}, 2, nil, []string{"a", "b"}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := newAdmissionPlanner()
			var got []string
			plans := 0
			var wait time.Duration
			for len(got) < tc.max {
				p := pl.plan(tc.ws, tc.max-len(got))
				if len(p.entries) == 0 {
					break
				}
				decided := make([]store.Admission, len(p.reqs))
				if len(p.reqs) > 0 {
					plans++
				}
				for i, r := range p.reqs {
					decided[i] = store.Admission{Admitted: !tc.refuse[r.Holder]}
					if !decided[i].Admitted && strings.HasSuffix(r.Holder, "b") {
						decided[i].Wait = time.Second
					}
				}
				in, stray, w := p.outcome(decided)
				if len(stray) > 0 {
					t.Fatalf("stray admissions %v: the plan let a request ride behind one it might be refused with", stray)
				}
				pl.decided(&p, in)
				for _, x := range in {
					got = append(got, x.d.Envelope.ID)
				}
				wait = max(wait, w)
			}
			if !slices.Equal(got, tc.want) || plans != tc.plans || wait != tc.refused {
				t.Errorf("admitted %v in %d Admits, wait %v; want %v in %d, wait %v", got, plans, wait, tc.want, tc.plans, tc.refused)
			}
		})
	}
}

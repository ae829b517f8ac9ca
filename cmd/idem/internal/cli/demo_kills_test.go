package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// The SQLite demo delivers the SIGKILLs it was asked for whatever the
// run's speed: here it reads its progress only every 2 s, by when a run of
// 40 sagas is long finished, and it still kills a worker mid-run (issue
// 31's note: "only 0 SIGKILLs").
func TestDemoDeliversItsKillsWhateverTheSpeed(t *testing.T) {
	t.Parallel()
	o := demoOptions{searches: 40, files: 2, replicas: 1, kills: 1, seed: 1, timeout: 2 * time.Minute, json: true, store: "sqlite", poll: 2 * time.Second}
	var out, errOut bytes.Buffer
	err := runDemo(context.Background(), o, &out, &errOut)
	var r demoReport
	if jerr := json.Unmarshal(out.Bytes(), &r); jerr != nil {
		t.Fatalf("demo: %v, report %q: %v\n%s", err, out.String(), jerr, errOut.String())
	}
	if err != nil || !r.Pass || r.Kills < o.kills {
		t.Errorf("demo --searches 40 --kills 1, progress read every 2 s: error %v, pass %v, %d SIGKILLs, violations %q; want a pass with at least 1", err, r.Pass, r.Kills, r.Violations)
	}
}

// The kill plan puts each saga's envelopes in one share, and however fast
// the workers are (here every saga published is finished at each read of
// the progress), every planned kill is due before the run can finish.
func TestKillPlanDeliversEveryKill(t *testing.T) {
	for _, c := range []struct{ searches, kills int }{{40, 1}, {60, 2}, {100, 3}, {20, 0}, {2000, 3}} {
		var envs []idem.Envelope
		for i := range c.searches {
			envs = append(envs, idem.Envelope{ID: fmt.Sprintf("api-search-%05d", i)}, idem.Envelope{ID: fmt.Sprintf("s3-search-%05d-renotified", i)})
		}
		envs = append(envs, idem.Envelope{ID: "bad-json-0"})
		p := newKillPlan(envs, c.searches, c.kills)
		published := map[int]bool{}
		publish := func(share []idem.Envelope) {
			for _, env := range share {
				if i := demoSagaOf(env.ID); i >= 0 {
					published[i] = true
				}
			}
		}
		total := 0
		for j, share := range p.shares {
			total += len(share)
			for _, env := range share {
				if i := demoSagaOf(env.ID); i >= 0 && (i < p.bound(j-1) || i >= p.bound(j)) {
					t.Errorf("%+v: saga %d in share %d of [%d, %d)", c, i, j, p.bound(j-1), p.bound(j))
				}
			}
		}
		if total != len(envs) {
			t.Errorf("%+v: %d envelopes in the shares, want %d", c, total, len(envs))
		}
		publish(p.shares[0])
		for step := 0; ; step++ {
			finished := len(published)
			if finished == c.searches && p.delivered() {
				break
			}
			if step > 10*(c.kills+2) {
				t.Fatalf("%+v: stuck at %d finished, %d kills delivered", c, finished, p.done)
			}
			publish(p.next(finished))
			if p.due(len(published)) {
				if len(published) == c.searches && p.done < c.kills-1 {
					t.Errorf("%+v: every saga published before kill %d", c, p.done+1)
				}
				p.done++
			}
		}
	}
}

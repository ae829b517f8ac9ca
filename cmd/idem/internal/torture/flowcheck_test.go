package torture

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// The flow check's breakage tests: each property of a limits run broken
// on purpose in a synthetic history, and caught; and the histories a
// correct engine produces under scheduling noise, passed.

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

var (
	capKey  = store.LimitKey{Name: "cap"}
	rateKey = store.LimitKey{Name: "rate"}
)

// flowLimits: a cap of 2, and a rate of 20/s with a burst of 5.
var flowLimits = map[string]store.Limit{
	"cap":  {Name: "cap", Concurrency: 2},
	"rate": {Name: "rate", Rate: 20, Burst: 5},
}

const flowTTL = 2 * time.Second

// settled is an admission received in [begin, end] (ms) and settled
// successfully from settle on.
func settled(id string, begin, end, settle int, keys ...store.LimitKey) flowAdmission {
	return flowAdmission{Token: id + "-tok", ID: id, Keys: keys, Begin: ms(begin), End: ms(end), Settle: ms(settle), Settled: true}
}

// unsettled is an admission whose worker never settled it (killed).
func unsettled(id string, begin, end int, keys ...store.LimitKey) flowAdmission {
	return flowAdmission{Token: id + "-tok", ID: id, Keys: keys, Begin: ms(begin), End: ms(end)}
}

func runFlowCheck(t *testing.T, h *flowHistory, p *flowParams) []Violation {
	t.Helper()
	if p.Limits == nil {
		p.Limits = flowLimits
	}
	if p.TTL == 0 {
		p.TTL = flowTTL
	}
	vs, _ := checkFlow(h, p)
	for _, v := range vs {
		t.Logf("violation: %s", v)
	}
	return vs
}

// caught fails unless vs holds exactly one violation, of inv, whose
// detail holds detail and which names msgs (when given).
func caught(t *testing.T, vs []Violation, inv, detail string, msgs ...string) {
	t.Helper()
	if len(vs) != 1 {
		t.Fatalf("got %d violations, want one %s", len(vs), inv)
	}
	v := vs[0]
	if v.Invariant != inv || !strings.Contains(v.Detail, detail) {
		t.Errorf("got %s, want %s with %q", v, inv, detail)
	}
	for _, m := range msgs {
		if !slices.Contains(v.Messages, m) {
			t.Errorf("violation %s does not name message %s", v, m)
		}
	}
}

func passes(t *testing.T, vs []Violation) {
	t.Helper()
	if len(vs) > 0 {
		t.Errorf("got %d violations of a correct history, want none", len(vs))
	}
}

func TestFlowCheckCap(t *testing.T) {
	for _, tc := range []struct {
		name   string
		as     []flowAdmission
		caught []string // the messages of the violation; nil: passes
	}{
		{"two at once pass", []flowAdmission{
			settled("a", 0, 5, 100, capKey), settled("b", 0, 5, 100, capKey),
			settled("c", 100, 105, 200, capKey), // begins as a ends: half-open
		}, nil},
		{"a third at once is caught", []flowAdmission{
			settled("a", 0, 5, 100, capKey), settled("b", 0, 5, 100, capKey), settled("c", 50, 60, 200, capKey),
		}, []string{"a", "b", "c"}},
		// A worker killed while it held a: its hold lives until its lease
		// runs out (Begin + TTL), though its process is gone.
		{"a killed worker's slot is held until its lease ends", []flowAdmission{
			unsettled("a", 0, 5, capKey), settled("b", 1000, 1005, 1500, capKey), settled("c", 1100, 1105, 1200, capKey),
		}, []string{"a", "b", "c"}},
		{"after the lease ends the slot is free", []flowAdmission{
			unsettled("a", 0, 5, capKey), settled("b", 2000, 2005, 2500, capKey), settled("c", 2100, 2105, 2200, capKey),
		}, nil},
		// A settlement that failed (lease lost, or the database gone) may
		// come long after the hold lapsed: the hold counts until the
		// lease's earliest end, not until the failed settlement.
		{"a failed settlement after the lease is not a hold", []flowAdmission{
			{Token: "a-tok", ID: "a", Keys: []store.LimitKey{capKey}, Begin: ms(0), End: ms(5), Settle: ms(3000)},
			settled("b", 2100, 2105, 2500, capKey), settled("c", 2100, 2105, 2200, capKey),
		}, nil},
		// A worker descheduled after its receive returned: its End is
		// late, so its hold is shorter, never longer.
		{"a late End under noise passes", []flowAdmission{
			settled("a", 0, 5, 100, capKey), settled("b", 90, 400, 450, capKey), settled("c", 100, 101, 300, capKey),
		}, nil},
		// Two keys of one limit are two counters: 2 each.
		{"each key has its own cap", []flowAdmission{
			settled("a", 0, 5, 100, store.LimitKey{Name: "cap", Key: "x"}), settled("b", 0, 5, 100, store.LimitKey{Name: "cap", Key: "x"}),
			settled("c", 0, 5, 100, store.LimitKey{Name: "cap", Key: "y"}), settled("d", 0, 5, 100, store.LimitKey{Name: "cap", Key: "y"}),
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := runFlowCheck(t, &flowHistory{Admissions: tc.as}, &flowParams{})
			if tc.caught == nil {
				passes(t, vs)
				return
			}
			caught(t, vs, InvConcurrency, "counter cap: 3 holds live at once", tc.caught...)
		})
	}
}

// spaced are n admissions of the rate's counter, one every gap ms from
// start, each received in a call of width ms.
func spaced(prefix string, n, start, gap, width int) []flowAdmission {
	var out []flowAdmission
	for i := range n {
		b := start + i*gap
		out = append(out, settled(prefix+string(rune('a'+i%26))+strings.Repeat("'", i/26), b, b+width, b+width+1, rateKey))
	}
	return out
}

func TestFlowCheckRate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		as    []flowAdmission
		catch bool
	}{
		// The bucket's pace: a burst of 5, then one every 50 ms.
		{"burst then the rate passes", append(spaced("b", 5, 0, 0, 1), spaced("r", 40, 50, 50, 1)...), false},
		{"a sixth in the burst is caught", append(spaced("b", 6, 0, 0, 1), spaced("r", 10, 50, 50, 1)...), true},
		{"twice the rate is caught", spaced("r", 100, 0, 25, 1), true},
		// Workers descheduled before they noted their receive's return:
		// the Ends bunch up, the Begins do not; a correct run passes.
		{"bunched Ends under noise pass", func() []flowAdmission {
			as := append(spaced("b", 5, 0, 0, 1), spaced("r", 20, 50, 50, 1)...)
			for i := range as {
				as[i].End = ms(1100) // every worker noted its return at once
			}
			return as
		}(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := runFlowCheck(t, &flowHistory{Admissions: tc.as}, &flowParams{})
			if !tc.catch {
				passes(t, vs)
				return
			}
			caught(t, vs, InvRate, "counter rate:")
		})
	}
}

func TestFlowCheckLeakedSlot(t *testing.T) {
	uses := []store.LimitUse{
		{LimitKey: capKey, InFlight: 0, Tokens: 3},
		{LimitKey: store.LimitKey{Name: "cap", Key: "tenant-b"}, InFlight: 1},
	}
	vs := runFlowCheck(t, &flowHistory{}, &flowParams{Uses: uses})
	caught(t, vs, InvLeakedSlot, "counter cap[tenant-b]: 1 in flight")
	passes(t, runFlowCheck(t, &flowHistory{}, &flowParams{Uses: uses[:1]}))
}

func TestFlowCheckStarvation(t *testing.T) {
	quiet := settled("q1", 3000, 3005, 3100)
	quiet.Tenant = "quiet"
	flood := settled("f1", 100, 105, 200)
	flood.Tenant = "flood"
	h := func(unaccounted ...flowReceive) *flowHistory {
		return &flowHistory{Admissions: []flowAdmission{quiet, flood},
			Published: map[string]time.Time{"q1": ms(0), "f1": ms(0)}, Unaccounted: unaccounted}
	}
	t.Run("a wait past the bound is caught", func(t *testing.T) {
		vs := runFlowCheck(t, h(), &flowParams{FairnessBound: time.Second})
		caught(t, vs, InvStarved, `tenant "quiet": 1 messages waited through a stall longer than 1s`, "q1")
	})
	t.Run("off by default", func(t *testing.T) {
		passes(t, runFlowCheck(t, h(), &flowParams{}))
	})
	t.Run("within the bound passes", func(t *testing.T) {
		passes(t, runFlowCheck(t, h(), &flowParams{FairnessBound: 5 * time.Second}))
	})
	// A worker killed inside a receive may have admitted q1 without a
	// record: its wait is unknown, and it is not judged.
	t.Run("a receive without a record makes the wait unknown", func(t *testing.T) {
		passes(t, runFlowCheck(t, h(flowReceive{Begin: ms(500), End: ms(700)}), &flowParams{FairnessBound: time.Second}))
		passes(t, runFlowCheck(t, h(flowReceive{Begin: ms(500)}), &flowParams{FairnessBound: time.Second}))
	})
	// A flood waits long behind its own backlog, but it is admitted all
	// along: it does not stall.
	t.Run("a long wait with steady progress passes", func(t *testing.T) {
		var as []flowAdmission
		pub := map[string]time.Time{}
		for i := range 10 {
			a := settled(fmt.Sprint("f", i), 500*i+100, 500*i+105, 500*i+200)
			a.Tenant = "flood"
			as = append(as, a)
			pub[a.ID] = ms(0)
		}
		h := &flowHistory{Admissions: as, Published: pub}
		passes(t, runFlowCheck(t, h, &flowParams{FairnessBound: time.Second}))
		// Without the admissions in between, the last one stalls.
		h = &flowHistory{Admissions: []flowAdmission{as[0], as[9]}, Published: map[string]time.Time{"f0": ms(0), "f9": ms(0)}}
		caught(t, runFlowCheck(t, h, &flowParams{FairnessBound: time.Second}), InvStarved, `tenant "flood"`, "f9")
	})
	t.Run("an unrecorded receive before the publication does not", func(t *testing.T) {
		vs := runFlowCheck(t, h(flowReceive{Begin: ms(-500), End: ms(-100)}), &flowParams{FairnessBound: time.Second})
		caught(t, vs, InvStarved, `tenant "quiet"`, "q1")
	})
}

// The flow logs a worker writes read back into the history the check
// takes: a receive cut short by a kill is unaccounted until the worker's
// exit, a last line cut short is dropped, and a settlement counts from
// its first try.
func TestReadFlowHistory(t *testing.T) {
	dir := t.TempDir()
	l, err := openFlowLog(filepath.Join(dir, flowLogName(7)))
	if err != nil {
		t.Fatal(err)
	}
	env := transport.Envelope{ID: "inc-1", Type: incType, Headers: map[string]string{fairnessHeader: tenantQuiet}}
	d := transport.Delivery{Envelope: env, Token: "1:heldabc"}
	plain := transport.Delivery{Envelope: transport.Envelope{ID: "tick-1", Type: tickType}, Token: "2:heldabc"}
	nacked := transport.Delivery{Envelope: transport.Envelope{ID: "parse-1", Type: parseType}, Token: "3:heldabc"}
	r := l.begin()
	l.end(r, []transport.Delivery{d, plain, nacked}, nil)
	// A Nack that succeeds may have been ignored (the row gone): it
	// proves no live hold.
	l.settle([]string{nacked.Token}, "nack")
	l.settled([]string{nacked.Token}, "nack", nil)
	held := l.heldOf([]transport.Delivery{d, plain})
	l.settle(held, "commit")
	l.settled(held, "commit", store.ErrConflict)
	l.settle(held, "commit")
	l.settled(held, "commit", nil)
	l.begin() // killed inside this receive
	if _, err := l.f.WriteString(`{"ev":"recv-e`); err != nil {
		t.Fatal(err)
	}
	exit := time.Now()
	hist := []Record{{ID: "inc-1", Kind: kindInc}, {Kind: kindPublished, At: t0}}
	h, err := readFlowHistory(dir, hist, map[int]time.Time{7: exit})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Admissions) != 2 {
		t.Fatalf("got %d admissions, want 2 (the tick needs no counter): %+v", len(h.Admissions), h.Admissions)
	}
	a, n := h.Admissions[0], h.Admissions[1]
	if n.ID != "parse-1" || n.Settled || n.Settle.IsZero() {
		t.Errorf("got admission %+v, want parse-1 with a settlement sent, not proven", n)
	}
	want := []store.LimitKey{{Name: limitTenant, Key: tenantQuiet}}
	if a.ID != "inc-1" || a.Tenant != tenantQuiet || !slices.Equal(a.Keys, want) || !a.Settled || a.Settle.IsZero() || a.End.Before(a.Begin) {
		t.Errorf("got admission %+v, want inc-1 of the quiet tenant needing %v, settled", a, want)
	}
	if len(h.Unaccounted) != 1 || !h.Unaccounted[0].End.Equal(exit) {
		t.Errorf("got unaccounted receives %+v, want the one cut short, ending at the exit %s", h.Unaccounted, exit)
	}
	if !h.Published["inc-1"].Equal(t0) {
		t.Errorf("inc-1 published at %s, want %s", h.Published["inc-1"], t0)
	}
	if err := os.WriteFile(filepath.Join(dir, flowLogName(8)), []byte("{bad\n{\"ev\":\"settle\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readFlowHistory(dir, hist, nil); err == nil {
		t.Error("a bad line before the last was accepted")
	}
}

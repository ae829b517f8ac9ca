package torture

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// Beside a broker the flow log is keyed by holder: the store wrapper's
// Admit, the commit that releases holds, ReleaseHolds and ExtendHolds
// write it, and it reads back into holder-keyed admissions, each bounded
// by the release that may have ended it and the earliest expiry.
func TestReadFlowHistoryBesideBroker(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	l, err := openFlowLog(filepath.Join(dir, flowLogName(3)))
	if err != nil {
		t.Fatal(err)
	}
	s := &faultStore{Store: memstore.New(nil), f: &faults{flow: l}}
	parser := []store.LimitKey{{Name: limitResource}}
	limits := map[string]store.Limit{limitResource: {Name: limitResource, Concurrency: 2}}
	admit := func(holders ...string) []store.Admission {
		t.Helper()
		p := &store.AdmitParams{Limits: limits, TTL: time.Minute}
		for _, h := range holders {
			p.Requests = append(p.Requests, store.AdmitRequest{Holder: h, Keys: append(parser, parser...)})
		}
		adm, err := s.Admit(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return adm
	}
	if adm := admit("h1", "h2", "h3"); !adm[0].Admitted || !adm[1].Admitted || adm[2].Admitted {
		t.Fatalf("got %+v, want h1 and h2 admitted, h3 refused by the cap", adm)
	}
	// h1 released by the commit of its outcome, h2 by a call.
	u, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	commitSent := time.Now()
	if err := u.Commit(ctx, &store.Changes{ReleaseHolds: []string{"h1"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseHolds(ctx, []string{"h2"}); err != nil {
		t.Fatal(err)
	}
	// h3 admitted once the slots are free, then its hold shortened.
	if adm := admit("h3"); !adm[0].Admitted {
		t.Fatalf("h3 refused after the releases: %+v", adm)
	}
	extended := time.Now()
	if err := s.ExtendHolds(ctx, []string{"h3"}, time.Second); err != nil {
		t.Fatal(err)
	}
	l.open("admit-begin", nil, "") // killed inside this Admit
	exit := time.Now()

	h, err := readFlowHistory(dir, nil, map[int]time.Time{3: exit})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range h.Admissions {
		got = append(got, a.Token)
		if !slices.Equal(a.Keys, parser) || a.Settled || a.End.Before(a.Begin) || a.ID != "" {
			t.Errorf("admission %+v: want holder-keyed, needing %v once, never settled by proof", a, parser)
		}
	}
	if !slices.Equal(got, []string{"h1", "h2", "h3"}) {
		t.Fatalf("got admissions of %v, want h1, h2, h3 (the refusal is no admission)", got)
	}
	h1, h2, h3 := h.Admissions[0], h.Admissions[1], h.Admissions[2]
	if h1.Settle.IsZero() || h1.Settle.Before(commitSent) || !h1.Settle.Before(h2.Settle) {
		t.Errorf("h1 released from %s, want the commit's sending (after %s, before h2's release %s)", h1.Settle, commitSent, h2.Settle)
	}
	if !h1.Expires.Equal(h1.Begin.Add(time.Minute)) {
		t.Errorf("h1 expires from %s, want Begin + the Admit's TTL %s", h1.Expires, h1.Begin.Add(time.Minute))
	}
	// h3's earlier refusal left no admission, and the releases of h1 and
	// h2 name other holders: its hold is cut only by the extension.
	if !h3.Settle.IsZero() || h3.Expires.Before(h3.Begin.Add(time.Second)) || h3.Expires.After(extended.Add(time.Second)) {
		t.Errorf("h3: release %s, expiry %s; want none, and the extension's %s + 1s", h3.Settle, h3.Expires, extended)
	}
	if len(h.Unaccounted) != 1 || !h.Unaccounted[0].End.Equal(exit) {
		t.Errorf("got unaccounted calls %+v, want the Admit cut short, ending at the exit", h.Unaccounted)
	}
	vs, sum := checkFlow(h, &flowParams{Limits: limits, TTL: time.Minute})
	if len(vs) > 0 || sum.MostInFlight[limitResource] != 2 || sum.Holds != 3 {
		t.Errorf("got violations %v, most in flight %d, %d holds judged; want none, 2, 3", vs, sum.MostInFlight[limitResource], sum.Holds)
	}
}

// writeFlowLog writes a flow log of events whose T are in ms from t0.
func writeFlowLog(t *testing.T, dir string, gen int, evs ...flowEvent) {
	t.Helper()
	var b strings.Builder
	for _, ev := range evs {
		ev.T = ms(int(ev.T)).UnixNano()
		line, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(filepath.Join(dir, flowLogName(gen)), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// admitEvents are an Admit numbered r over [begin, end] ms admitting
// holders on the cap's counter, with a TTL of flowTTL.
func admitEvents(r int64, begin, end int, holders ...string) []flowEvent {
	ev := flowEvent{Ev: "admit-end", R: r, T: int64(end), OK: true, TTL: int64(flowTTL)}
	for _, h := range holders {
		ev.D = append(ev.D, flowDelive{Holder: h, Keys: []store.LimitKey{capKey}})
	}
	return []flowEvent{{Ev: "admit-begin", R: r, T: int64(begin)}, ev}
}

// The flow check beside a broker, from synthetic holder-keyed logs: a
// third holder over a cap of 2 is caught, by holder; a holder admitted
// again holds one slot; a release counts against a later admission of
// its holder unless it returned before that admission began.
func TestFlowCheckBesideBroker(t *testing.T) {
	release := func(r int64, sent, done int, ok bool, holders ...string) []flowEvent {
		evs := []flowEvent{{Ev: "release", R: r, T: int64(sent), Holders: holders, How: "commit"}}
		if done >= 0 {
			evs = append(evs, flowEvent{Ev: "released", R: r, T: int64(done), OK: ok})
		}
		return evs
	}
	for _, tc := range []struct {
		name   string
		logs   [][]flowEvent // one per worker
		caught string        // the holders the violation names; "": passes
	}{
		{"a third holder over the cap is caught", [][]flowEvent{
			slices.Concat(admitEvents(1, 0, 5, "a", "b"), release(2, 100, 110, true, "a", "b")),
			slices.Concat(admitEvents(1, 50, 60, "c"), release(2, 200, 210, true, "c")),
		}, "a, b, c"},
		{"released before the third passes", [][]flowEvent{
			slices.Concat(admitEvents(1, 0, 5, "a", "b"), release(2, 40, 45, true, "a")),
			slices.Concat(admitEvents(1, 50, 60, "c"), release(2, 200, 210, true, "c")),
		}, ""},
		// A killed worker's hold lives until Begin + TTL.
		{"an unreleased hold lives until its TTL", [][]flowEvent{
			slices.Concat(admitEvents(1, 0, 5, "a", "b"), release(2, 40, 45, true, "a")),
			slices.Concat(admitEvents(1, 1000, 1005, "c", "d"), release(2, 1500, -1, false, "c", "d")),
		}, "b, c, d"},
		{"an extension shorter than the TTL ends it sooner", [][]flowEvent{
			slices.Concat(admitEvents(1, 0, 5, "a", "b"), release(2, 40, 45, true, "a"),
				[]flowEvent{{Ev: "extend", T: 500, Holders: []string{"b"}, TTL: int64(100 * time.Millisecond)}}),
			slices.Concat(admitEvents(1, 1000, 1005, "c", "d"), release(2, 1500, -1, false, "c", "d")),
		}, ""},
		{"a holder admitted twice holds one slot", [][]flowEvent{
			slices.Concat(admitEvents(1, 0, 5, "a", "b"), admitEvents(2, 10, 15, "b"), release(3, 100, 110, true, "a", "b")),
		}, ""},
		// b released (returned) before its re-admission: the release
		// does not end the later hold, which overlaps a and c.
		{"a release returned before a re-admission does not end it", [][]flowEvent{
			slices.Concat(admitEvents(1, 0, 5, "a", "b"), release(2, 10, 15, true, "b"),
				admitEvents(3, 20, 25, "b"), release(4, 300, 310, true, "a", "b")),
			slices.Concat(admitEvents(1, 100, 105, "c"), release(2, 200, 210, true, "c")),
		}, "a, b, c"},
		// The same, but the release failed: it may have taken effect
		// after the re-admission, so b's later hold is not certain.
		{"a failed release may end a re-admission", [][]flowEvent{
			slices.Concat(admitEvents(1, 0, 5, "a", "b"), release(2, 10, 15, false, "b"),
				admitEvents(3, 20, 25, "b"), release(4, 300, 310, true, "a", "b")),
			slices.Concat(admitEvents(1, 100, 105, "c"), release(2, 200, 210, true, "c")),
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for i, evs := range tc.logs {
				writeFlowLog(t, dir, i+1, evs...)
			}
			h, err := readFlowHistory(dir, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			vs := runFlowCheck(t, h, &flowParams{TTL: time.Hour}) // the logs' TTL, not the run's, bounds the holds
			if tc.caught == "" {
				passes(t, vs)
				return
			}
			caught(t, vs, InvConcurrency, "counter cap: 3 holds live at once")
			if want := "(holders " + tc.caught + ")"; len(vs) == 1 && !strings.Contains(vs[0].Detail, want) {
				t.Errorf("violation %s does not name %s", vs[0], want)
			}
		})
	}
}

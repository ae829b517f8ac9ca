package torture

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/idemhq/idem/store"
)

// Invariants of a limits run (Options.Limits).
const (
	InvConcurrency = "limit-concurrency" // more holds of a capped counter at once than its cap
	InvRate        = "limit-rate"        // more admissions in a window of length t than Rate × t + Burst
	InvLeakedSlot  = "limit-leaked-slot" // a counter still in use once the run drained
	InvStarved     = "tenant-starved"    // a tenant had a message waiting and no admission for longer than Options.FairnessBound
)

// What the flow check asserts, and why it never fails a correct run.
//
// Each worker writes a flow log (limits.go): before it calls the store's
// admitting receive, when that returns (with the deliveries that needed a
// counter and the counters they needed), before it sends the commit, Ack
// or Nack that settles such deliveries, and whether that succeeded.
// Beside a broker it logs the store's Admit, the releases and the
// extensions of holds instead (holds.go; see below). Every time is the
// worker's wall clock; the workers and the database share one
// host, so the database's clock (PostgreSQL's clock_timestamp) and the
// workers' are one clock. Nothing here trusts the worker to be quick: a
// worker can be descheduled between any two instructions, so each event
// is only ever used as a bound on the side where a delay cannot move it
// across the store's decision.
//
//   - Admission. The store decides a delivery's admission, and stamps its
//     token bucket, inside the receive call: at a time A with Begin ≤ A ≤
//     End, where Begin is noted before the call and End after it returns.
//     A delay of the worker only widens [Begin, End].
//   - Rate. A set of k admissions of one counter lies within
//     [min Begin, max End], so a correct token bucket admitted them in a
//     window of at most that length t: k ≤ Rate × t + Burst. A violation
//     is reported only when k exceeds that bound for the widest window,
//     so no scheduling delay can make a correct run fail; a delay only
//     makes the check weaker around the admissions it delayed (the report
//     gives the receive calls' widths).
//   - Concurrency. A delivery's hold is live from the commit of its
//     admission (before End) until the commit that settles it, or until
//     its lease lapses: at Begin + TTL at the earliest, since the hold is
//     stamped at A ≥ Begin. A unit of work's commit that consumes a
//     delivery succeeds only while its lease is live (a row gone or past
//     its lease fails it with ErrLeaseLost), and a lapsed lease is never
//     renewed (store.AdmittingQueue), so a hold whose commit succeeded
//     was live from End until the first settlement was sent (noted
//     before it; an earlier one that failed may have released it). An
//     Ack or a Nack that succeeds proves nothing (one on a row already
//     gone is ignored, not refused), so a hold settled only by those, or
//     whose settlement failed or was never sent (the worker was killed,
//     stalled past its lease, or lost the database), was live at least
//     from End until min(Begin + TTL, the first settlement sent).
//     Each interval is thus inside its hold, and more than Concurrency
//     intervals containing one instant prove more live holds than the
//     cap. A killed worker's hold still counts until its lease runs out:
//     the slot is taken though its process is gone.
//   - Beside a broker (holds.go) the engine admits through the store's
//     Admit after it receives, and the log is keyed by holder (one per
//     delivery, made by the engine): Begin and End bound the Admit call,
//     which stamps each hold and token at A with Begin ≤ A ≤ End, the
//     hold expiring at A + TTL by the database's clock. Admission and
//     rate are then as above. A hold is live from End until it is
//     released or expires. A release (a commit naming the holder in
//     store.Changes.ReleaseHolds, or a ReleaseHolds call) takes effect
//     at some time after it was sent (noted before); one that returned
//     successfully before Begin took effect before A and cannot end this
//     hold, any other (failed, cut off, or later) may have. A commit's
//     success proves nothing here: it is not fenced by the hold, which
//     may have expired under it. An extension sent at X with ttl sets
//     the expiry, if the hold is still live, to a time at or after
//     min(A, X) + ttl (PostgreSQL's now() is its statement's start, which
//     may precede a re-admission's A). So the hold was live at least
//     over [End, min(first release that may have ended it, Begin + TTL,
//     min(Begin, X) + ttl of each extension)]. Extensions never push the
//     bound past Begin + TTL: one that returned successfully proves no
//     hold extended (PostgreSQL skips a hold row another transaction has
//     locked, and extends only holds still live at its own now(), which
//     the log bounds no better than Begin + TTL). A holder admitted
//     again (the engine decides a delivery again after an Admit whose
//     outcome it lost) holds one slot per counter however often it was
//     admitted (the store keeps one hold), so the cap's sweep counts
//     holders, not intervals.
//   - Lost events. An event a SIGKILL cut off (the worker died between
//     the store's commit and its write) is missing from the log: the
//     check then sees fewer admissions and shorter holds, never more.
//   - Leaked slot. Once the run drained and a lease has passed, every
//     counter reads zero in flight (store.Limiter.LimitUses).
//   - Starvation (opt-in, Options.FairnessBound; on the store's own
//     queue only, since the engine refuses FairShare beside a broker). A
//     message became visible before its wave's published record, and was
//     admitted at A ≥ Begin of its first recorded admission: it waited at
//     least Begin − published. A receive that may have admitted it
//     earlier without a record (a worker killed inside its receive, until
//     its exit; a receive that failed) makes the message's wait unknown,
//     and it is not judged.
//
// Exactly-once is checked by Check, as in every run.

// flowAdmission is one delivery admitted with counters, from a flow log.
type flowAdmission struct {
	// Token names its holds: the delivery's token on the store's own
	// queue, its holder beside a broker (where ID and Tenant are
	// unknown). One holder holds at most one hold of a counter at a
	// time, however often it was admitted.
	Token, ID, Tenant string
	Keys              []store.LimitKey
	// Begin and End bound the call that admitted it: the receive, or the
	// Admit beside a broker.
	Begin, End time.Time
	// Settle is when its first settlement was sent (zero: never), and
	// Settled whether a commit that consumed it succeeded (never beside a
	// broker: there a commit's success proves no live hold).
	Settle  time.Time
	Settled bool
	// Expires, when set, is the earliest its hold may expire (beside a
	// broker: from the Admit's TTL and the extensions); zero: Begin plus
	// the run's lease.
	Expires time.Time
}

// hold is the interval in which the admission's hold was certainly live
// (see above); ok is false when it is empty.
func (a *flowAdmission) hold(ttl time.Duration) (from, to time.Time, ok bool) {
	from, to = a.End, a.Settle
	if !a.Settled {
		to = a.Expires
		if to.IsZero() {
			to = a.Begin.Add(ttl)
		}
		if !a.Settle.IsZero() && a.Settle.Before(to) {
			to = a.Settle
		}
	}
	return from, to, to.After(from)
}

// flowReceive is a receive that may have admitted deliveries it left no
// record of: it failed, or its worker died inside it (End is then the
// worker's exit as the driver saw it, zero when unknown).
type flowReceive struct {
	Begin, End time.Time
}

// flowHistory is what the flow check reads: the workers' flow logs and
// when the driver's messages were published.
type flowHistory struct {
	Admissions  []flowAdmission
	Unaccounted []flowReceive
	// Published is, by message ID, a time after its publication.
	Published map[string]time.Time
}

// flowParams are the flow check's inputs besides the history.
type flowParams struct {
	// Limits are the limits in force, by name.
	Limits map[string]store.Limit
	// TTL is the lease, which a hold lives at least.
	TTL time.Duration
	// FairnessBound, when positive, is the longest a tenant's message may
	// wait for its admission (InvStarved).
	FairnessBound time.Duration
	// Uses are the counters' uses once the run drained.
	Uses []store.LimitUse
}

// FlowSummary sums up a limits run.
type FlowSummary struct {
	// Admissions counts the admitted deliveries recorded.
	Admissions int
	// Holds counts the holds of capped counters with a certain interval
	// (the others are too short to prove anything): what the cap check
	// judged.
	Holds int
	// MostInFlight is, per capped limit, the most holds seen live at once
	// on one counter (certain intervals only: a lower bound).
	MostInFlight map[string]int
	// MostPerSecond is, per rate-limited limit, the most admissions
	// certainly within one second on one counter.
	MostPerSecond map[string]int
	// ReceiveP50 and ReceiveMax are the widths of the receive calls that
	// admitted something: the uncertainty of an admission's time.
	ReceiveP50, ReceiveMax time.Duration
	// Unaccounted counts receives that may have admitted unrecorded
	// deliveries.
	Unaccounted int
	// WorstWait is, per tenant, the longest certain wait for a first
	// admission, and WorstStall the longest certain time in which one of
	// its messages waited and it had no admission at all (what
	// Options.FairnessBound bounds).
	WorstWait, WorstStall map[string]time.Duration
}

// Print writes the summary for people.
func (s *FlowSummary) Print(w interface{ Write([]byte) (int, error) }) {
	fmt.Fprintf(w, "  limits: %d admissions recorded, %d holds of a cap judged; admitting call (receive or Admit) width p50 %s, max %s; %d calls unaccounted (killed or failed)\n",
		s.Admissions, s.Holds, s.ReceiveP50.Round(time.Millisecond), s.ReceiveMax.Round(time.Millisecond), s.Unaccounted)
	for _, n := range slices.Sorted(maps.Keys(s.MostInFlight)) {
		fmt.Fprintf(w, "    %-20s most in flight at once: %d\n", n, s.MostInFlight[n])
	}
	for _, n := range slices.Sorted(maps.Keys(s.MostPerSecond)) {
		fmt.Fprintf(w, "    %-20s most admitted within 1s: %d\n", n, s.MostPerSecond[n])
	}
	for _, t := range slices.Sorted(maps.Keys(s.WorstWait)) {
		fmt.Fprintf(w, "    tenant %-13s longest wait for admission: %s; longest stall with none admitted: %s\n", t, s.WorstWait[t].Round(time.Millisecond), s.WorstStall[t].Round(time.Millisecond))
	}
}

// checkFlow checks h against the limits of p (see above).
func checkFlow(h *flowHistory, p *flowParams) ([]Violation, *FlowSummary) {
	sum := &FlowSummary{Admissions: len(h.Admissions), Unaccounted: len(h.Unaccounted),
		MostInFlight: map[string]int{}, MostPerSecond: map[string]int{}, WorstWait: map[string]time.Duration{}, WorstStall: map[string]time.Duration{}}
	sum.ReceiveP50, sum.ReceiveMax = receiveWidths(h.Admissions)
	var vs []Violation
	byCounter := map[store.LimitKey][]*flowAdmission{}
	for i := range h.Admissions {
		a := &h.Admissions[i]
		for _, k := range uniqueKeys(a.Keys) {
			byCounter[k] = append(byCounter[k], a)
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(byCounter), store.LimitKey.Compare) {
		l, ok := p.Limits[k.Name]
		if !ok {
			continue
		}
		as := byCounter[k]
		if l.Concurrency > 0 {
			v, most, n := checkCap(k, l, as, p.TTL)
			sum.Holds += n
			vs = append(vs, v...)
			sum.MostInFlight[k.Name] = max(sum.MostInFlight[k.Name], most)
		}
		if l.Rate > 0 {
			v, most := checkRate(k, l, as)
			vs = append(vs, v...)
			sum.MostPerSecond[k.Name] = max(sum.MostPerSecond[k.Name], most)
		}
	}
	vs = append(vs, checkLeaks(p.Uses)...)
	vs = append(vs, checkStarvation(h, p.FairnessBound, sum.WorstWait, sum.WorstStall)...)
	return vs, sum
}

func uniqueKeys(ks []store.LimitKey) []store.LimitKey {
	out := slices.Clone(ks)
	slices.SortFunc(out, store.LimitKey.Compare)
	return slices.Compact(out)
}

func receiveWidths(as []flowAdmission) (p50, most time.Duration) {
	if len(as) == 0 {
		return 0, 0
	}
	ws := make([]time.Duration, len(as))
	for i := range as {
		ws[i] = as[i].End.Sub(as[i].Begin)
	}
	slices.Sort(ws)
	return ws[len(ws)/2], ws[len(ws)-1]
}

func counterName(k store.LimitKey) string {
	if k.Key == "" {
		return k.Name
	}
	return fmt.Sprintf("%s[%s]", k.Name, k.Key)
}

// checkCap sweeps the certain hold intervals of one counter: at no instant
// may those of more holders than the cap contain it. Intervals are
// half-open, [from, to): a hold that ends when another begins does not
// overlap it. It reports the first excess, the most seen at once, and
// the intervals judged.
func checkCap(k store.LimitKey, l store.Limit, as []*flowAdmission, ttl time.Duration) ([]Violation, int, int) {
	type edge struct {
		at    time.Time
		delta int
		a     *flowAdmission
	}
	var edges []edge
	for _, a := range as {
		if from, to, ok := a.hold(ttl); ok {
			edges = append(edges, edge{from, 1, a}, edge{to, -1, a})
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta // ends first
	})
	// live counts, by holder, its intervals containing the sweep's
	// instant: a holder admitted again while it held the counter still
	// holds one slot.
	live := map[string]int{}
	ids := map[string]string{} // by holder: its message, when known
	most := 0
	var vs []Violation
	for _, e := range edges {
		if e.delta < 0 {
			if live[e.a.Token]--; live[e.a.Token] == 0 {
				delete(live, e.a.Token)
			}
			continue
		}
		live[e.a.Token]++
		ids[e.a.Token] = e.a.ID
		most = max(most, len(live))
		if len(live) > l.Concurrency && len(vs) == 0 {
			msgs, holders := liveNames(live, ids)
			vs = append(vs, Violation{Invariant: InvConcurrency, Messages: msgs,
				Detail: fmt.Sprintf("counter %s: %d holds live at once at %s, cap %d%s", counterName(k), len(live), e.at.UTC().Format(time.RFC3339Nano), l.Concurrency, holders)})
		}
	}
	return vs, most, len(edges) / 2
}

// liveNames names the live holds: the messages whose IDs are known, and
// the others by holder (beside a broker), as a suffix of the detail.
func liveNames(live map[string]int, ids map[string]string) (msgs []string, holders string) {
	var hs []string
	for tok := range live {
		if ids[tok] != "" {
			msgs = append(msgs, ids[tok])
		} else {
			hs = append(hs, tok)
		}
	}
	slices.Sort(msgs)
	slices.Sort(hs)
	if len(hs) > 0 {
		holders = " (holders " + strings.Join(hs, ", ") + ")"
	}
	return msgs, holders
}

// checkRate checks that no set of admissions of one counter exceeds Rate
// × t + Burst, t the widest window that may hold them ([min Begin, max
// End]). For each left edge it considers the admissions that begin at or
// after it in order of their End: the m-th of them closes the tightest
// window holding m admissions from that edge. It reports the worst
// excess, and the most admissions within one second.
func checkRate(k store.LimitKey, l store.Limit, as []*flowAdmission) ([]Violation, int) {
	sorted := slices.Clone(as)
	slices.SortFunc(sorted, func(a, b *flowAdmission) int { return a.Begin.Compare(b.Begin) })
	burst := l.BucketSize()
	var worst *Violation
	worstExcess := 0.0
	most := 0
	ends := make([]time.Time, 0, len(sorted))
	for i, left := range sorted {
		if i > 0 && left.Begin.Equal(sorted[i-1].Begin) {
			continue // the same window as the previous edge
		}
		ends = ends[:0]
		for _, a := range sorted[i:] {
			ends = append(ends, a.End)
		}
		slices.SortFunc(ends, time.Time.Compare)
		for m, end := range ends {
			n := m + 1
			t := end.Sub(left.Begin)
			if t <= time.Second {
				most = max(most, n)
			}
			if excess := float64(n) - (l.Rate*t.Seconds() + burst); excess > 1e-9 && excess > worstExcess {
				worstExcess = excess
				worst = &Violation{Invariant: InvRate, Detail: fmt.Sprintf("counter %s: %d admitted within %s (from %s), at most %.2f allowed (rate %g/s, burst %g)",
					counterName(k), n, t.Round(time.Microsecond), left.Begin.UTC().Format(time.RFC3339Nano), l.Rate*t.Seconds()+burst, l.Rate, burst)}
			}
		}
	}
	if worst == nil {
		return nil, most
	}
	return []Violation{*worst}, most
}

// checkLeaks reports every counter still in use once the run drained.
func checkLeaks(uses []store.LimitUse) []Violation {
	var vs []Violation
	for _, u := range uses {
		if u.InFlight != 0 {
			vs = append(vs, Violation{Invariant: InvLeakedSlot,
				Detail: fmt.Sprintf("counter %s: %d in flight once the run drained and a lease passed (a slot never released)", counterName(u.LimitKey), u.InFlight)})
		}
	}
	return vs
}

// checkStarvation fills worst with each tenant's longest certain wait for
// a first admission and, with a positive bound, reports each tenant
// whose wait exceeded it, naming its longest-waiting messages.
func checkStarvation(h *flowHistory, bound time.Duration, worst, stalls map[string]time.Duration) []Violation {
	first := map[string]*flowAdmission{}
	byTenant := map[string][]*flowAdmission{}
	for i := range h.Admissions {
		a := &h.Admissions[i]
		if a.Tenant == "" {
			continue
		}
		byTenant[a.Tenant] = append(byTenant[a.Tenant], a)
		if f := first[a.ID]; f == nil || a.Begin.Before(f.Begin) {
			first[a.ID] = a
		}
	}
	for _, as := range byTenant {
		slices.SortFunc(as, func(x, y *flowAdmission) int { return x.Begin.Compare(y.Begin) })
	}
	over := map[string][]string{}
	for _, id := range slices.Sorted(maps.Keys(first)) {
		a := first[id]
		pub, ok := h.Published[id]
		if !ok || !a.Begin.After(pub) {
			continue
		}
		if !mayHaveAdmitted(h.Unaccounted, pub, a.Begin) {
			worst[a.Tenant] = max(worst[a.Tenant], a.Begin.Sub(pub))
		}
		stall := longestStall(byTenant[a.Tenant], h.Unaccounted, pub, a.Begin)
		stalls[a.Tenant] = max(stalls[a.Tenant], stall)
		if bound > 0 && stall > bound {
			over[a.Tenant] = append(over[a.Tenant], id)
		}
	}
	var vs []Violation
	for _, t := range slices.Sorted(maps.Keys(over)) {
		ids := over[t]
		vs = append(vs, Violation{Invariant: InvStarved, Key: t, Messages: ids[:min(len(ids), 10)],
			Detail: fmt.Sprintf("tenant %q: %d messages waited through a stall longer than %s with no admission of the tenant (longest %s)", t, len(ids), bound, stalls[t].Round(time.Millisecond))})
	}
	return vs
}

// longestStall is the longest time within (from, to) in which the tenant
// whose admissions as are (sorted by Begin) certainly had none: between
// one admission's receive end (it happened by then) and the next one's
// receive begin (not before). A gap that a receive without a record
// overlaps may hide an admission, and is not counted. A tenant that
// makes progress while its backlog drains does not stall, however long
// its messages wait behind their own backlog.
func longestStall(as []*flowAdmission, unaccounted []flowReceive, from, to time.Time) time.Duration {
	var stall time.Duration
	cursor := from
	gap := func(until time.Time) {
		if until.After(cursor) && !mayHaveAdmitted(unaccounted, cursor, until) {
			stall = max(stall, until.Sub(cursor))
		}
	}
	for _, a := range as {
		if !a.Begin.After(from) {
			cursor = maxTime(cursor, a.End)
			continue
		}
		if a.Begin.After(to) {
			break
		}
		gap(a.Begin)
		cursor = maxTime(cursor, a.End)
	}
	gap(to)
	return stall
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// mayHaveAdmitted reports whether a receive without a record overlaps
// (from, to).
func mayHaveAdmitted(rs []flowReceive, from, to time.Time) bool {
	for _, r := range rs {
		if r.Begin.Before(to) && (r.End.IsZero() || r.End.After(from)) {
			return true
		}
	}
	return false
}

// readFlowHistory reads the workers' flow logs in dir and the history's
// publication marks; exits are the workers' exits by generation, as the
// driver saw them.
func readFlowHistory(dir string, hist []Record, exits map[int]time.Time) (*flowHistory, error) {
	files, err := filepath.Glob(filepath.Join(dir, "flow-*.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("list the flow logs: %w", err)
	}
	rd := &flowReader{h: &flowHistory{Published: published(hist)}, byToken: map[string]*flowAdmission{},
		settles: map[string]time.Time{}, settled: map[string]bool{},
		releases: map[string][]*holdRelease{}, extends: map[string][]holdExtend{}}
	for _, f := range files {
		var gen int
		if _, err := fmt.Sscanf(filepath.Base(f), "flow-%d.jsonl", &gen); err != nil {
			return nil, fmt.Errorf("flow log %s: %w", f, err)
		}
		evs, err := readFlowLog(f)
		if err != nil {
			return nil, err
		}
		rd.readLog(evs, exits[gen])
	}
	return rd.history(), nil
}

// flowReader gathers the flow logs' events into a flowHistory.
type flowReader struct {
	h *flowHistory
	// On the store's own queue, by delivery token: its admission, when
	// its first settlement was sent, and whether a commit settled it.
	byToken map[string]*flowAdmission
	settles map[string]time.Time
	settled map[string]bool
	// Beside a broker, by holder: its admissions (a holder may be
	// decided again after an Admit whose outcome was unknown), its
	// releases and its extensions.
	held     []flowAdmission
	releases map[string][]*holdRelease
	extends  map[string][]holdExtend
}

// holdRelease is a release of holds: when it was sent, when it returned
// (zero: never, its worker was killed) and whether it succeeded.
type holdRelease struct {
	sent, done time.Time
	ok         bool
}

// holdExtend is an extension of holds: when it was sent, and its TTL.
type holdExtend struct {
	at  time.Time
	ttl time.Duration
}

// readLog reads the events of one worker's log; exit is when the driver
// saw that worker exit.
func (rd *flowReader) readLog(evs []flowEvent, exit time.Time) {
	begins := map[int64]time.Time{}
	rels := map[int64]*holdRelease{}
	for _, ev := range evs {
		t := time.Unix(0, ev.T)
		switch ev.Ev {
		case "recv-begin", "admit-begin":
			begins[ev.R] = t
		case "recv-end", "admit-end":
			b, ok := begins[ev.R]
			delete(begins, ev.R)
			if ok {
				rd.admitted(&ev, b, t)
			}
		case "settle":
			for _, tok := range ev.Tokens {
				if s, ok := rd.settles[tok]; !ok || t.Before(s) {
					rd.settles[tok] = t
				}
			}
		case "settled":
			for _, tok := range ev.Tokens {
				rd.settled[tok] = rd.settled[tok] || ev.OK && ev.How == "commit"
			}
		case "release":
			rel := &holdRelease{sent: t}
			rels[ev.R] = rel
			for _, hd := range ev.Holders {
				rd.releases[hd] = append(rd.releases[hd], rel)
			}
		case "released":
			if rel := rels[ev.R]; rel != nil {
				rel.done, rel.ok = t, ev.OK
			}
		case "extend":
			for _, hd := range ev.Holders {
				rd.extends[hd] = append(rd.extends[hd], holdExtend{at: t, ttl: time.Duration(ev.TTL)})
			}
		}
	}
	for _, b := range begins { // the worker died inside these
		rd.h.Unaccounted = append(rd.h.Unaccounted, flowReceive{Begin: b, End: exit})
	}
}

// admitted records the end of a receive or an Admit that began at b.
func (rd *flowReader) admitted(ev *flowEvent, b, t time.Time) {
	if !ev.OK {
		rd.h.Unaccounted = append(rd.h.Unaccounted, flowReceive{Begin: b, End: t})
	}
	for _, d := range ev.D {
		if d.Holder != "" {
			expires := b.Add(time.Duration(ev.TTL))
			rd.held = append(rd.held, flowAdmission{Token: d.Holder, Keys: d.Keys, Begin: b, End: t, Expires: expires})
			continue
		}
		rd.byToken[d.Token] = &flowAdmission{Token: d.Token, ID: d.ID, Tenant: d.Tenant, Keys: d.Keys, Begin: b, End: t}
	}
}

// history returns the admissions read, each with its settlement: on the
// store's own queue, its first settlement sent and whether a commit
// settled it; beside a broker, the first release that may have ended its
// hold, and the earliest its hold may expire.
func (rd *flowReader) history() *flowHistory {
	h := rd.h
	for _, tok := range slices.Sorted(maps.Keys(rd.byToken)) {
		a := rd.byToken[tok]
		a.Settle, a.Settled = rd.settles[tok], rd.settled[tok]
		h.Admissions = append(h.Admissions, *a)
	}
	slices.SortStableFunc(rd.held, func(a, b flowAdmission) int {
		if c := strings.Compare(a.Token, b.Token); c != 0 {
			return c
		}
		return a.Begin.Compare(b.Begin)
	})
	for _, a := range rd.held {
		for _, rel := range rd.releases[a.Token] {
			if rel.ok && rel.done.Before(a.Begin) {
				continue // released before this admission began: not its hold
			}
			if a.Settle.IsZero() || rel.sent.Before(a.Settle) {
				a.Settle = rel.sent
			}
		}
		for _, x := range rd.extends[a.Token] {
			if e := minTime(a.Begin, x.at).Add(x.ttl); e.Before(a.Expires) {
				a.Expires = e
			}
		}
		h.Admissions = append(h.Admissions, a)
	}
	return h
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// published maps each message the driver sent to the At of the first
// publication mark after it.
func published(hist []Record) map[string]time.Time {
	out := map[string]time.Time{}
	var pending []string
	for _, r := range hist {
		switch {
		case r.Kind == kindPublished:
			for _, id := range pending {
				out[id] = r.At
			}
			pending = pending[:0]
		case r.ID != "":
			pending = append(pending, r.ID)
		}
	}
	return out
}

// readFlowLog reads one flow log; a last line cut short by a SIGKILL is
// dropped.
func readFlowLog(path string) ([]flowEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the flow log: %w", err)
	}
	defer f.Close()
	var out []flowEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var bad error
	for line := 1; sc.Scan(); line++ {
		if bad != nil {
			return nil, bad // a bad line that was not the last
		}
		var ev flowEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			bad = fmt.Errorf("flow log %s line %d: %w", path, line, err)
			continue
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}

// drainedUses polls the counters' uses until none is in flight, for at
// most ttl and a second (the holds of a killed worker lapse with its
// lease), and returns the last read.
func drainedUses(ctx context.Context, l store.Limiter, ttl time.Duration) ([]store.LimitUse, error) {
	deadline := time.Now().Add(ttl + time.Second)
	for {
		uses, err := l.LimitUses(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the limits' uses: %w", err)
		}
		busy := slices.ContainsFunc(uses, func(u store.LimitUse) bool { return u.InFlight > 0 })
		if !busy || time.Now().After(deadline) {
			return uses, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond): // polling the store with a deadline
		}
	}
}

// flowCheck reads the flow logs and the drained uses, and checks them.
func (r *driver) flowCheck(ctx context.Context, hist []Record) ([]Violation, *FlowSummary, error) {
	h, err := readFlowHistory(r.dir, hist, r.exits)
	if err != nil {
		return nil, nil, err
	}
	uses, err := drainedUses(ctx, r.st.(store.Limiter), workerLease)
	if err != nil {
		return nil, nil, err
	}
	vs, sum := checkFlow(h, &flowParams{Limits: runLimitValues(), TTL: workerLease, FairnessBound: r.o.FairnessBound, Uses: uses})
	return vs, sum, nil
}

// flowLogPath is the flow log of the worker of generation gen, empty
// unless the run has limits.
func (r *driver) flowLogPath(gen int) string {
	if !r.o.Limits {
		return ""
	}
	return filepath.Join(r.dir, flowLogName(gen))
}

// noteExit notes when the driver saw the worker of generation gen exit.
func (r *driver) noteExit(gen int) {
	if r.exits == nil {
		r.exits = map[int]time.Time{}
	}
	r.exits[gen] = time.Now()
}

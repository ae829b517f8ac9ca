package torture

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// TickCounts sums up the ticks of a run's schedules.
type TickCounts struct {
	// Fired ticks published a message (each must be applied once).
	Fired int
	// Coalesced ticks were passed over by a fire-once advance that fired a
	// later tick: no replica polled between them and that tick.
	Coalesced int
	// Skipped ticks were passed over by a skip-missed advance that fired
	// nothing: found later than the schedule's grace.
	Skipped int
}

// schedCheck checks one schedule.
type schedCheck struct {
	decl    Record // the history's declaration
	every   int64  // the interval, in microseconds
	advs    []advance
	final   *store.Schedule
	applied map[string]int // tick message ID → journal rows of the ledger
	add     func(msgs []string, format string, args ...any)
	counts  *TickCounts
	fired   map[int64][]int64 // tick → the audit rows that fired it
}

// checkSchedules checks the schedules the history declares. What the
// engine promises for a schedule, and what is checked, given the audit
// table's record of every change of its next tick:
//
//   - the advances form one unbroken chain from the schedule's creation to
//     its final next tick (each starts where the previous one ended): no
//     tick is claimed twice, none passed over unrecorded;
//   - each advance moves to a later tick, and when it fires, it fires the
//     latest tick it passes over (the one just before its new next tick);
//     a fire-once advance always fires; a skip-missed one may fire nothing;
//   - the store's row ends where the chain ends;
//   - every tick fired is applied exactly once by the ledger saga (none
//     lost, none doubled, even the last one fired before the run
//     stopped), and the ledger applied no other tick.
//
// So every tick from the first to the last is accounted for: fired and
// applied once, or passed over as the schedule's policy says (coalesced
// into a later tick, or skipped).
func checkSchedules(ctx context.Context, hist []Record, st store.Store, db *sql.DB, journal []journalRow) ([]Violation, TickCounts, error) {
	var vs []Violation
	var counts TickCounts
	var decls []Record
	for _, r := range hist {
		if r.Kind == kindSchedule {
			decls = append(decls, r)
		}
	}
	applied := map[string]map[string]int{} // schedule → message ID → count
	for _, j := range journal {
		if j.sagaType == ledgerSagaType {
			if applied[j.key] == nil {
				applied[j.key] = map[string]int{}
			}
			applied[j.key][j.msgID]++
		}
	}
	declared := map[string]bool{}
	for _, d := range decls {
		declared[d.Key] = true
	}
	for key, ids := range applied {
		if !declared[key] {
			vs = append(vs, Violation{Invariant: InvSchedule, SagaType: ledgerSagaType, Key: key, Messages: sortedKeys(ids),
				Detail: "ticks applied for a schedule the run did not declare"})
		}
	}
	if len(decls) == 0 {
		return vs, counts, nil
	}
	advs, err := readAdvances(ctx, db, 0)
	if err != nil {
		return nil, counts, err
	}
	sc, ok := st.(store.Scheduler)
	if !ok {
		return nil, counts, fmt.Errorf("checker: store %T keeps no schedules", st)
	}
	for _, d := range decls {
		c := &schedCheck{decl: d, every: d.Every.Microseconds(), applied: applied[d.Key], counts: &counts, fired: map[int64][]int64{}}
		c.add = func(msgs []string, format string, args ...any) {
			vs = append(vs, Violation{Invariant: InvSchedule, SagaType: ledgerSagaType, Key: d.Key, Messages: msgs, Detail: fmt.Sprintf(format, args...)})
		}
		for _, a := range advs {
			if a.name == d.Key {
				c.advs = append(c.advs, a)
			}
		}
		if c.final, err = sc.GetSchedule(ctx, d.Key); err != nil {
			c.add(nil, "not in the store after the run: %v", err)
			continue
		}
		c.run()
	}
	return vs, counts, nil
}

func (c *schedCheck) run() {
	if len(c.advs) == 0 || c.advs[0].from.Valid {
		c.add(nil, "its creation is not in the audit table: the checker cannot tell where its ticks start")
		return
	}
	next, last := c.advs[0].to, int64(0)
	if next%c.every != 0 {
		c.add(nil, "created with its first tick at %s, not a multiple of %s", us(next), c.decl.Every)
	}
	for _, a := range c.advs[1:] {
		if !a.from.Valid {
			c.add(nil, "created again (audit row %d): deleted during the run", a.seq)
			next = a.to
			continue
		}
		if a.from.Int64 != next {
			c.add(nil, "advance (audit row %d) from %s does not continue the chain at %s: a tick claimed twice, or ticks passed over unrecorded", a.seq, us(a.from.Int64), us(next))
		}
		if f := c.advance(a); f != 0 {
			last = f
		}
		next = a.to
	}
	if got := c.final.NextDue.UnixMicro(); got != next {
		c.add(nil, "the store's next tick is %s, but its last recorded advance left %s", us(got), us(next))
	}
	if got := c.final.LastTick; (last == 0) != got.IsZero() || last != 0 && got.UnixMicro() != last {
		c.add(nil, "the store's last fired tick is %s, but its last recorded firing is %s", us(got.UnixMicro()), us(last))
	}
	c.matchApplied()
}

// advance checks one advance and counts the ticks it covers; it returns
// the tick it fired, or 0.
func (c *schedCheck) advance(a advance) int64 {
	from, to := a.from.Int64, a.to
	if to <= from || to%c.every != 0 {
		c.add(nil, "advance (audit row %d) from %s to %s: not a later tick of the schedule", a.seq, us(from), us(to))
		return 0
	}
	if !a.fired.Valid {
		if c.decl.Missed != store.MissedSkip {
			c.add(nil, "advance (audit row %d) from %s to %s fired nothing: a %s schedule lost %d ticks", a.seq, us(from), us(to), c.decl.Missed, (to-from)/c.every)
		}
		c.counts.Skipped += int((to - from) / c.every)
		return 0
	}
	f := a.fired.Int64
	switch {
	case f < from || f >= to || f%c.every != 0:
		c.add([]string{idem.TickID(c.decl.Key, time.UnixMicro(f))}, "advance (audit row %d) from %s to %s fired %s, not one of the ticks it passed over", a.seq, us(from), us(to), us(f))
	case to != f+c.every:
		c.add([]string{idem.TickID(c.decl.Key, time.UnixMicro(f))}, "advance (audit row %d) from %s to %s fired %s, not the latest tick it passed over", a.seq, us(from), us(to), us(f))
	}
	c.fired[f] = append(c.fired[f], a.seq)
	c.counts.Fired++
	if passed := int(max(0, (f-from)/c.every)); c.decl.Missed == store.MissedSkip {
		c.counts.Skipped += passed
	} else {
		c.counts.Coalesced += passed
	}
	return f
}

// matchApplied matches the ticks fired with the ticks the ledger applied.
func (c *schedCheck) matchApplied() {
	left := map[string]int{}
	for id, n := range c.applied {
		left[id] = n
	}
	ticks := make([]int64, 0, len(c.fired))
	for f := range c.fired {
		ticks = append(ticks, f)
	}
	slices.Sort(ticks)
	for _, f := range ticks {
		id := idem.TickID(c.decl.Key, time.UnixMicro(f))
		n := left[id]
		delete(left, id)
		switch by := c.fired[f]; {
		case len(by) > 1:
			c.add([]string{id}, "tick %s fired by %d advances (audit rows %v): claimed twice", us(f), len(by), by)
		case n == 0:
			c.add([]string{id}, "tick %s fired (audit row %d committed its advance) but never applied: lost", us(f), by[0])
		case n > 1:
			c.add([]string{id}, "tick %s applied %d times: doubled", us(f), n)
		}
	}
	if len(left) > 0 {
		c.add(sortedKeys(left), "%d tick messages applied that no recorded advance fired (a tick fired without its advance, or under another ID)", len(left))
	}
}

// us formats Unix microseconds.
func us(t int64) string { return time.UnixMicro(t).UTC().Format(time.RFC3339Nano) }

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

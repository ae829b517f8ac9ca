package pgstore

import "github.com/idemhq/idem/store"

// lastWins returns c, or a shallow copy of c whose timers and dead letters
// name each row once. A multi-row INSERT … ON CONFLICT DO UPDATE cannot
// touch one row twice (SQLSTATE 21000), but the contract lets one commit
// schedule a timer name twice or record two dead letters with one ID: the
// later replaces the earlier, as consecutive commits would have it, and a
// dead letter keeps the earliest FirstFailedAt of its records.
func lastWins(c *store.Changes) *store.Changes {
	timers, dupTimers := lastTimers(c.Timers)
	dls, dupDLs := lastDeadLetters(c.DeadLetters)
	if !dupTimers && !dupDLs {
		return c
	}
	cp := *c
	cp.Timers, cp.DeadLetters = timers, dls
	return &cp
}

// lastTimers keeps the last timer of each (saga type, key, name), in the
// order of those last ones. It reports whether it dropped any.
func lastTimers(ts []store.Timer) ([]store.Timer, bool) {
	if len(ts) < 2 {
		return ts, false
	}
	last := make(map[store.TimerKey]int, len(ts))
	for i, t := range ts {
		last[store.TimerKey{SagaType: t.SagaType, Key: t.Key, Name: t.Name}] = i
	}
	if len(last) == len(ts) {
		return ts, false
	}
	out := make([]store.Timer, 0, len(last))
	for i, t := range ts {
		if last[store.TimerKey{SagaType: t.SagaType, Key: t.Key, Name: t.Name}] == i {
			out = append(out, t)
		}
	}
	return out, true
}

// lastDeadLetters keeps the last dead letter of each ID, in the order of
// those last ones, with the earliest FirstFailedAt among the records of its
// ID. It reports whether it dropped any.
func lastDeadLetters(ds []store.DeadLetter) ([]store.DeadLetter, bool) {
	if len(ds) < 2 {
		return ds, false
	}
	last := make(map[string]int, len(ds))
	for i, d := range ds {
		last[d.ID] = i
	}
	if len(last) == len(ds) {
		return ds, false
	}
	out := make([]store.DeadLetter, 0, len(last))
	at := make(map[string]int, len(last)) // ID → index in out
	for i, d := range ds {
		if last[d.ID] == i {
			at[d.ID] = len(out)
			out = append(out, d)
		}
	}
	for _, d := range ds {
		if o := &out[at[d.ID]]; d.FirstFailedAt.Before(o.FirstFailedAt) {
			o.FirstFailedAt = d.FirstFailedAt
		}
	}
	return out, true
}

package torture

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/searchimport"
	"github.com/idemhq/idem/internal/countersaga"
	"github.com/idemhq/idem/internal/ids"
	"github.com/idemhq/idem/store"
)

// handlerSagaType is the engine's inbox namespace for plain handlers.
const handlerSagaType = "idem.handler"

// Invariants the checker verifies; each violation names one.
const (
	InvAtMostOnce    = "at-most-once"     // a message applied twice to a saga
	InvExactlyOnce   = "exactly-once"     // a message the driver sent never applied
	InvFinalState    = "final-state"      // a saga not in the state the model predicts
	InvEmitted       = "emitted-consumed" // an emitted message not consumed under its deterministic ID
	InvStuck         = "not-stuck"        // a saga non-terminal with nothing in flight
	InvDeadLetter    = "bad-input"        // bad input not dead-lettered with its reason
	InvUnexpectedDLQ = "no-unexpected-dead-letter"
	InvSchedule      = "schedule-tick" // a schedule tick lost, doubled, or fired against the schedule's policy
	// InvDeployDeadLetter is a message dead-lettered for a reason a
	// deploy causes (unknown_state, unhandled_event, state_schema): a
	// replica that could not serve its saga gave up on it.
	InvDeployDeadLetter = "no-deploy-dead-letter"
)

// Violation is one broken invariant, with the saga and messages it is
// about.
type Violation struct {
	Invariant string   `json:"invariant"`
	SagaType  string   `json:"saga_type,omitempty"`
	Key       string   `json:"key,omitempty"`
	Messages  []string `json:"messages,omitempty"`
	Detail    string   `json:"detail"`
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s]", v.Invariant)
	if v.SagaType != "" {
		fmt.Fprintf(&b, " saga %s/%q", v.SagaType, v.Key)
	}
	if len(v.Messages) > 0 {
		fmt.Fprintf(&b, " message %s", strings.Join(v.Messages, ", "))
	}
	return b.String() + ": " + v.Detail
}

// deployReasons are the dead-letter reasons of a message whose saga the
// replica's definition could not serve: a deploy causes them.
var deployReasons = []string{idem.ReasonUnknownState, idem.ReasonUnhandled, idem.ReasonSchema}

type journalRow struct {
	sagaType, key, msgID, event, to string
}

type inboxKey struct{ sagaType, key, msgID string }

// Check verifies the history against what the database holds after the
// run settled. st lists the saga instances and schedules; db reads the
// journal, inbox and dead-letter tables (same names in both SQL stores),
// and the schedule audit table when the history declares schedules (see
// checkSchedules).
func Check(ctx context.Context, hist []Record, st store.Store, db *sql.DB) ([]Violation, error) {
	vs, _, err := check(ctx, hist, st, db)
	return vs, err
}

// check is Check, also returning the schedules' tick counts.
func check(ctx context.Context, hist []Record, st store.Store, db *sql.DB) ([]Violation, TickCounts, error) {
	var vs []Violation
	add := func(inv, sagaType, key string, msgs []string, format string, args ...any) {
		vs = append(vs, Violation{Invariant: inv, SagaType: sagaType, Key: key, Messages: msgs, Detail: fmt.Sprintf(format, args...)})
	}

	// What the database holds.
	var journal []journalRow
	applied := map[inboxKey]int{}
	if err := scanRows(ctx, db, `SELECT saga_type, key, message_id, event_type, to_state FROM idem_journal ORDER BY id`, func(r *sql.Rows) error {
		var j journalRow
		if err := r.Scan(&j.sagaType, &j.key, &j.msgID, &j.event, &j.to); err != nil {
			return err
		}
		journal = append(journal, j)
		applied[inboxKey{j.sagaType, j.key, j.msgID}]++
		return nil
	}); err != nil {
		return nil, TickCounts{}, err
	}
	inbox := map[inboxKey]bool{}
	if err := scanRows(ctx, db, `SELECT saga_type, key, message_id FROM idem_inbox`, func(r *sql.Rows) error {
		var k inboxKey
		if err := r.Scan(&k.sagaType, &k.key, &k.msgID); err != nil {
			return err
		}
		// A saga's inbox record names the message type, then U+001F,
		// then the dedup ID; the history knows messages by ID.
		if _, id, ok := strings.Cut(k.msgID, "\x1f"); ok {
			k.msgID = id
		}
		inbox[k] = true
		return nil
	}); err != nil {
		return nil, TickCounts{}, err
	}
	dead := map[string]string{}
	deadSaga := map[string]store.Key{}
	if err := scanRows(ctx, db, `SELECT id, reason, saga_type, key FROM idem_dead_letters`, func(r *sql.Rows) error {
		var id, reason string
		var k store.Key
		if err := r.Scan(&id, &reason, &k.SagaType, &k.Key); err != nil {
			return err
		}
		dead[id], deadSaga[id] = reason, k
		return nil
	}); err != nil {
		return nil, TickCounts{}, err
	}
	instances := map[store.Key]*store.Instance{}
	for _, typ := range []string{countersaga.SagaType, searchimport.SagaType} {
		for after := ""; ; {
			page, err := st.ListInstances(ctx, &store.ListParams{SagaType: typ, After: after, Limit: 1000})
			if err != nil {
				return nil, TickCounts{}, fmt.Errorf("list %s sagas: %w", typ, err)
			}
			for _, in := range page {
				instances[store.Key{SagaType: in.SagaType, Key: in.Key}] = in
			}
			if len(page) < 1000 {
				break
			}
			after = page[len(page)-1].Key
		}
	}

	// At most once: no (saga, message) twice in the journal.
	seenTwice := map[inboxKey]bool{}
	for _, j := range journal {
		k := inboxKey{j.sagaType, j.key, j.msgID}
		if n := applied[k]; n > 1 && !seenTwice[k] {
			seenTwice[k] = true
			add(InvAtMostOnce, j.sagaType, j.key, []string{j.msgID}, "applied %d times (journal): the inbox did not stop a duplicate", n)
		}
	}

	// The model, from the history.
	type counterModel struct {
		total int
		incs  []string
	}
	type searchModel struct {
		want  string
		files int
		msgs  []string
	}
	counters := map[string]*counterModel{}
	searches := map[string]*searchModel{}
	badWant := map[string]string{}
	for _, r := range hist {
		switch r.Kind {
		case kindInc:
			c := counters[r.Key]
			if c == nil {
				c = &counterModel{total: 1000} // the first increment's timer adds 1000
				counters[r.Key] = c
			}
			c.total += r.N
			c.incs = append(c.incs, r.ID)
			if applied[inboxKey{r.Saga, r.Key, r.ID}] == 0 {
				add(InvExactlyOnce, r.Saga, r.Key, []string{r.ID}, "sent %d times, never applied (lost)", r.Copies)
			}
		case kindStarted, kindSaved, kindRenotified:
			s := searches[r.Key]
			if s == nil {
				s = &searchModel{}
				searches[r.Key] = s
			}
			if r.Want != "" {
				s.want, s.files = r.Want, r.Files
			}
			s.msgs = append(s.msgs, r.ID)
			if !inbox[inboxKey{r.Saga, r.Key, r.ID}] {
				add(InvExactlyOnce, r.Saga, r.Key, []string{r.ID}, "sent %d times, never consumed (no inbox record: lost)", r.Copies)
			}
		case kindNotFound:
			if in := instances[store.Key{SagaType: r.Saga, Key: r.Key}]; in != nil {
				add(InvFinalState, r.Saga, r.Key, []string{r.ID}, "a message that cannot start a saga created one (state %s)", in.State)
			}
			if reason, ok := dead[r.ID]; ok {
				add(InvUnexpectedDLQ, r.Saga, r.Key, []string{r.ID}, "dead-lettered (%s), but the not-found policy is to ignore", reason)
			}
		case kindBad:
			badWant[r.ID] = r.Reason
		}
	}

	// Final states.
	for key, c := range counters {
		in := instances[store.Key{SagaType: countersaga.SagaType, Key: key}]
		if in == nil {
			add(InvFinalState, countersaga.SagaType, key, c.incs, "no saga: all its messages lost")
			continue
		}
		var d countersaga.Counter
		if err := json.Unmarshal(in.Data, &d); err != nil {
			return nil, TickCounts{}, fmt.Errorf("decode counter %s: %w", key, err)
		}
		if d.Total != c.total || in.State != "Open" {
			add(InvFinalState, countersaga.SagaType, key, c.incs, "state %s total %d, model predicts Open total %d", in.State, d.Total, c.total)
		}
		if len(in.Timers) > 0 {
			add(InvStuck, countersaga.SagaType, key, nil, "timer %v still scheduled after the run settled", in.Timers)
		}
	}
	for key, s := range searches {
		in := instances[store.Key{SagaType: searchimport.SagaType, Key: key}]
		switch {
		case in == nil:
			add(InvFinalState, searchimport.SagaType, key, s.msgs, "no saga: all its messages lost")
			continue
		case in.FinishedAt.IsZero():
			add(InvStuck, searchimport.SagaType, key, nil, "in non-terminal state %s with nothing in flight, model predicts %s", in.State, s.want)
		case in.State != s.want:
			add(InvFinalState, searchimport.SagaType, key, s.msgs, "state %s, model predicts %s", in.State, s.want)
		}
	}
	for k, in := range instances {
		_, isCounter := counters[k.Key]
		_, isSearch := searches[k.Key]
		if (k.SagaType == countersaga.SagaType && !isCounter) || (k.SagaType == searchimport.SagaType && !isSearch) {
			add(InvFinalState, k.SagaType, k.Key, nil, "a saga the model does not know (state %s): a key was not canonicalized, or a message was invented", in.State)
		}
	}

	// Every emitted message consumed under its deterministic ID.
	emitted := map[inboxKey]bool{}
	for _, j := range journal {
		switch {
		case j.sagaType == countersaga.SagaType && j.event == incType:
			k := inboxKey{handlerSagaType, addedType, ids.Derive("emit", j.msgID, j.sagaType, j.key, "0", "")}
			emitted[k] = true
			if !inbox[k] {
				add(InvEmitted, j.sagaType, j.key, []string{j.msgID, k.msgID}, "the Added event emitted by %s was not consumed under its deterministic ID %s", j.msgID, k.msgID)
			}
		case j.sagaType == searchimport.SagaType && j.event == savedType && j.to == "Uploaded":
			s := searches[j.key]
			if s == nil {
				continue
			}
			for i := range s.files {
				k := inboxKey{handlerSagaType, parseType, ids.Derive("emit", j.msgID, j.sagaType, j.key, strconv.Itoa(i), "")}
				emitted[k] = true
				if !inbox[k] {
					add(InvEmitted, j.sagaType, j.key, []string{j.msgID, k.msgID}, "parse command %d emitted by %s not consumed under its deterministic ID", i, j.msgID)
				} else if !inbox[inboxKey{searchimport.SagaType, j.key, replyID(k.msgID)}] {
					add(InvEmitted, j.sagaType, j.key, []string{k.msgID, replyID(k.msgID)}, "the parser's reply to command %s was not consumed", k.msgID)
				}
			}
		}
	}
	var phantom []string
	for k := range inbox {
		if k.sagaType == handlerSagaType && (k.key == addedType || k.key == parseType) && !emitted[k] {
			phantom = append(phantom, k.msgID)
		}
	}
	if len(phantom) > 0 {
		slices.Sort(phantom)
		add(InvEmitted, "", "", phantom[:min(len(phantom), 10)], "%d emitted messages consumed that no journaled transition emitted (an emission ID is not deterministic, or a transition was applied and lost)", len(phantom))
	}

	// Bad input: every one dead-lettered with its reason, and nothing else.
	for id, want := range badWant {
		got, ok := dead[id]
		switch {
		case !ok:
			add(InvDeadLetter, "", "", []string{id}, "not in the dead-letter store, want reason %s", want)
		case got != want:
			add(InvDeadLetter, "", "", []string{id}, "dead-lettered with reason %s, want %s", got, want)
		}
	}
	for id, reason := range dead {
		if _, ok := badWant[id]; !ok {
			if slices.Contains(deployReasons, reason) {
				k := deadSaga[id]
				add(InvDeployDeadLetter, k.SagaType, k.Key, []string{id}, "dead-lettered with reason %s: a replica could not serve its saga, and no replica that could took it in time", reason)
				continue
			}
			add(InvUnexpectedDLQ, "", "", []string{id}, "dead-lettered with reason %s, but the workload sent it as valid", reason)
		}
	}
	svs, ticks, err := checkSchedules(ctx, hist, st, db, journal)
	if err != nil {
		return nil, TickCounts{}, err
	}
	vs = append(vs, svs...)
	slices.SortFunc(vs, func(a, b Violation) int { return strings.Compare(a.String(), b.String()) })
	return vs, ticks, nil
}

func scanRows(ctx context.Context, db *sql.DB, query string, each func(*sql.Rows) error) error {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return fmt.Errorf("checker: %s: %w", query, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return fmt.Errorf("checker: %s: %w", query, err)
		}
	}
	return rows.Err()
}

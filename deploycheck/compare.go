package deploycheck

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// machine indexes one description.
type machine struct {
	d        saga.Description
	fp       string
	states   map[saga.State]saga.StateDescription
	events   map[string]saga.EventDescription
	attrs    map[string]bool
	upgrades map[int]bool
	moves    map[string]saga.State // declared state migrations: old state to new
	renamed  map[string]string     // declared message renames: old type to new
	requests map[string]bool       // the timer names of the declared requests
}

func index(d saga.Description) *machine {
	m := &machine{d: d, fp: d.Fingerprint(), states: map[saga.State]saga.StateDescription{}, events: map[string]saga.EventDescription{},
		attrs: map[string]bool{}, upgrades: map[int]bool{}, moves: map[string]saga.State{}, renamed: map[string]string{}, requests: map[string]bool{}}
	for _, r := range d.Requests {
		m.requests[r.Timer] = true
	}
	for _, mg := range d.Migrations {
		switch mg.Kind {
		case saga.MigrateStateKind:
			m.moves[mg.From] = saga.State(mg.To)
		case saga.MigrateMessageKind:
			m.renamed[mg.From] = mg.To
		}
	}
	for _, s := range d.States {
		m.states[s.Name] = s
	}
	for _, e := range d.Events {
		m.events[e.Type] = e
	}
	for _, a := range d.Attributes {
		m.attrs[a] = true
	}
	for _, u := range d.Upgrades {
		m.upgrades[u] = true
	}
	return m
}

// accepts reports whether a saga in state s handles or ignores event ev
// without an error: a final state ignores everything, and so does a
// machine whose unhandled policy is to ignore.
func (m *machine) accepts(s saga.State, ev string) bool {
	if to, ok := m.moves[string(s)]; ok {
		s = to
	}
	if n, ok := m.renamed[ev]; ok {
		ev = n
	}
	if st, ok := m.states[s]; ok && st.Final {
		return true
	}
	e, ok := m.events[ev]
	if !ok {
		return false
	}
	return slices.Contains(e.HandledIn, s) || slices.Contains(e.IgnoredIn, s) || m.d.Unhandled == "ignore"
}

// upgradable reports whether a state document at version v reaches the
// machine's schema version through its upgrade steps.
func (m *machine) upgradable(v int) bool {
	for from := v; from < m.d.SchemaVersion; from++ {
		if !m.upgrades[from] {
			return false
		}
	}
	return true
}

// comparison is one run of Compare.
type comparison struct {
	in       *Input
	o        Options
	now      time.Time
	machines map[string]*machine
	old      map[string][]*machine // previous definitions, by saga type
	consumed map[string]bool       // message types the new build consumes
	r        *Report
}

// Compare compares what in holds with o's machines and returns the
// report, hazards and notices each ordered by kind, then saga type,
// state and event.
func Compare(in *Input, o Options) *Report {
	c := &comparison{in: in, o: o, now: o.Now, machines: map[string]*machine{}, old: map[string][]*machine{}, consumed: map[string]bool{},
		r: &Report{Hazards: []Hazard{}, Notices: []Hazard{}, Live: map[string]int64{}, Census: in.Census}}
	if c.now.IsZero() {
		c.now = time.Now()
	}
	for _, d := range o.Machines {
		m := index(d)
		c.machines[d.Name] = m
		for ev := range m.events {
			c.consumed[ev] = true
		}
		for old := range m.renamed {
			c.consumed[old] = true
		}
	}
	for _, h := range o.Handled {
		c.consumed[h] = true
	}
	for t, recs := range in.Previous {
		for _, r := range recs {
			if r.Description.Name != "" {
				c.old[t] = append(c.old[t], index(r.Description))
			}
		}
	}
	c.states()
	c.timers()
	c.messages()
	c.attributes()
	c.fleet()
	c.samples()
	sortHazards(c.r.Hazards)
	sortHazards(c.r.Notices)
	return c.r
}

func (c *comparison) hazard(h Hazard) { c.r.Hazards = append(c.r.Hazards, h) }

// states checks each live (type, state, schema version) group.
func (c *comparison) states() {
	for _, s := range c.in.Census.States {
		c.r.Live[s.SagaType] += s.Count
		m, ok := c.machines[s.SagaType]
		switch {
		case !ok:
			c.hazard(Hazard{Kind: SagaTypeRemoved, SagaType: s.SagaType, State: s.State, Count: s.Count,
				Detail: fmt.Sprintf("%d live saga(s) of type %q in state %q, and the new build registers no machine of that type", s.Count, s.SagaType, s.State),
				Fix:    "register the machine again until these sagas finish, or end them (idem sagas end)"})
			continue
		case !m.hasState(s.State):
			c.hazard(Hazard{Kind: StateRemoved, SagaType: s.SagaType, State: s.State, Count: s.Count,
				Detail: fmt.Sprintf("%d live saga(s) in state %q, which the new machine does not declare", s.Count, s.State),
				Fix:    fmt.Sprintf("declare MigrateState(%q, <a kept state>), or declare the state again until these sagas have left it", s.State)})
		}
		switch {
		case s.SchemaVersion > m.d.SchemaVersion:
			c.hazard(Hazard{Kind: SchemaTooNew, SagaType: s.SagaType, State: s.State, Count: s.Count,
				Detail: fmt.Sprintf("%d live saga(s) stored at schema version %d; the new machine knows up to %d (a rollback past a schema change)", s.Count, s.SchemaVersion, m.d.SchemaVersion),
				Fix:    fmt.Sprintf("roll forward to a build at schema version %d or later", s.SchemaVersion)})
		case !m.upgradable(s.SchemaVersion):
			c.hazard(Hazard{Kind: SchemaNoUpgrade, SagaType: s.SagaType, State: s.State, Count: s.Count,
				Detail: fmt.Sprintf("%d live saga(s) stored at schema version %d; the new machine (version %d) has no upgrade path from it", s.Count, s.SchemaVersion, m.d.SchemaVersion),
				Fix:    fmt.Sprintf("declare Upgrade for every version from %d to %d", s.SchemaVersion, m.d.SchemaVersion-1)})
		}
	}
}

// hasState reports whether the machine serves sagas stored in s: it
// declares s (Initial and Ended are always there), or migrates it.
func (m *machine) hasState(s string) bool {
	_, ok := m.states[saga.State(s)]
	_, moved := m.moves[s]
	return ok || moved || s == string(saga.Initial) || s == string(saga.Ended)
}

// consumes reports whether the machine consumes messages of type t: an
// event's type, or a renamed one.
func (m *machine) consumes(t string) bool {
	_, ok := m.events[t]
	_, renamed := m.renamed[t]
	return ok || renamed
}

// timers checks the pending timers: each fires an event the new machine
// must consume, in the state its saga is in.
func (c *comparison) timers() {
	for _, t := range c.in.Census.Timers {
		m, ok := c.machines[t.SagaType]
		if !ok {
			continue // the sagas are reported as saga-type-removed
		}
		if strings.HasPrefix(t.Name, saga.RequestTimerPrefix) && !m.requests[t.Name] {
			c.hazard(Hazard{Kind: TimerOrphaned, SagaType: t.SagaType, State: t.State, Event: t.Name, Count: t.Count,
				Detail: fmt.Sprintf("%d pending request(s) %q, which the new machine no longer declares: their responses, faults and timeouts would all be ignored as stale, and the sagas wait for ever", t.Count, strings.TrimPrefix(t.Name, saga.RequestTimerPrefix)),
				Fix:    "keep the request under its old name until these requests are answered or time out"})
			continue
		}
		if !m.consumes(t.EventType) {
			c.hazard(Hazard{Kind: TimerOrphaned, SagaType: t.SagaType, State: t.State, Event: t.EventType, Count: t.Count,
				Detail: fmt.Sprintf("%d pending timer(s) named %q fire %q, which the new machine does not consume", t.Count, t.Name, t.EventType),
				Fix:    fmt.Sprintf("declare RenameMessage(%q, <an event's type>), or consume the event again until these timers have fired", t.EventType)})
			continue
		}
		if t.State != "" && m.hasState(t.State) && !m.accepts(saga.State(t.State), t.EventType) {
			c.hazard(Hazard{Kind: EventRefused, SagaType: t.SagaType, State: t.State, Event: t.EventType, Count: t.Count,
				Detail: fmt.Sprintf("%d pending timer(s) named %q fire %q at sagas in state %q, which no longer handles or ignores it", t.Count, t.Name, t.EventType, t.State),
				Fix:    fmt.Sprintf("handle or Ignore %s in %s", t.EventType, t.State)})
		}
	}
}

// messages checks the messages still to be handled: a queued one needs a
// consumer in the new build; an outbox one needs it when a previous
// definition consumed its type (otherwise it goes to another service);
// and live sagas of a type that consumed it before must still accept it
// in the state they are in.
func (c *comparison) messages() {
	for _, msg := range c.in.Census.Messages {
		if !c.consumed[msg.Type] && (msg.Where == readmodel.InQueue || c.consumedBefore(msg.Type)) {
			c.hazard(Hazard{Kind: MessageUnconsumed, Event: msg.Type, Count: msg.Count,
				Detail: fmt.Sprintf("%d message(s) of type %q in the %s, and nothing in the new build consumes that type", msg.Count, msg.Type, msg.Where),
				Fix:    fmt.Sprintf("declare RenameMessage(%q, <an event's type>) on the machine that consumed it, or consume the type again until these messages are handled", msg.Type)})
			continue
		}
		c.refusedByLive(msg)
	}
}

// consumedBefore reports whether a recorded definition consumed typ.
func (c *comparison) consumedBefore(typ string) bool {
	for _, ms := range c.old {
		for _, m := range ms {
			if m.consumes(typ) {
				return true
			}
		}
	}
	return false
}

// refusedByLive reports the live sagas of each new machine that consumes
// msg's type whose state no longer accepts it. Which saga a message is
// for is not counted, so the message may reach any of them; a state that
// a recorded definition refused as well is not reported (nothing
// changed there).
func (c *comparison) refusedByLive(msg readmodel.MessageCount) {
	for _, s := range c.in.Census.States {
		m, ok := c.machines[s.SagaType]
		if !ok || !m.hasState(s.State) {
			continue
		}
		if !m.consumes(msg.Type) || m.accepts(saga.State(s.State), msg.Type) || !c.acceptedBefore(s.SagaType, s.State, msg.Type) {
			continue
		}
		c.hazard(Hazard{Kind: EventRefused, SagaType: s.SagaType, State: s.State, Event: msg.Type, Count: s.Count,
			Detail: fmt.Sprintf("%d live saga(s) in state %q no longer accept %q, and %d message(s) of that type are in the %s", s.Count, s.State, msg.Type, msg.Count, msg.Where),
			Fix:    fmt.Sprintf("handle or Ignore %s in %s", msg.Type, s.State)})
	}
}

// acceptedBefore reports whether a recorded definition of typ accepted
// ev in state, or whether none is recorded (then nothing says it did not).
func (c *comparison) acceptedBefore(typ, state, ev string) bool {
	olds := c.old[typ]
	if len(olds) == 0 {
		return true
	}
	for _, m := range olds {
		if m.accepts(saga.State(state), ev) {
			return true
		}
	}
	return false
}

// attributes checks the stored attribute values.
func (c *comparison) attributes() {
	for _, a := range c.in.Census.Attributes {
		m, ok := c.machines[a.SagaType]
		if !ok || m.attrs[a.Name] {
			continue
		}
		c.hazard(Hazard{Kind: AttributeRemoved, SagaType: a.SagaType, Event: a.Name, Count: a.Count,
			Detail: fmt.Sprintf("%d stored value(s) of attribute %q, which the new machine no longer declares: the console's filters on it find stale values", a.Count, a.Name),
			Fix:    "declare the attribute again, or accept that its stored values stay until their sagas are saved again or swept"})
	}
}

// fleet checks the live replicas that run another definition.
func (c *comparison) fleet() {
	type group struct {
		typ, fp string
		ids     []string
	}
	groups := map[[2]string]*group{}
	for _, r := range c.in.Replicas {
		if r.ID == c.o.Self || r.State(c.now) != store.ReplicaAlive {
			continue
		}
		for typ, fp := range r.Definitions {
			m, ok := c.machines[typ]
			if ok && m.fp == fp {
				continue
			}
			g := groups[[2]string{typ, fp}]
			if g == nil {
				g = &group{typ: typ, fp: fp}
				groups[[2]string{typ, fp}] = g
			}
			g.ids = append(g.ids, r.ID)
		}
	}
	for _, g := range groups {
		c.mixed(g.typ, g.fp, g.ids)
	}
}

// mixed reports the live replicas ids that run definition fp of typ.
func (c *comparison) mixed(typ, fp string, ids []string) {
	slices.Sort(ids)
	h := Hazard{Kind: MixedFleet, SagaType: typ, Count: int64(len(ids))}
	m, ok := c.machines[typ]
	if !ok {
		h.Detail = fmt.Sprintf("%d live replica(s) (%s) run saga type %q (%s), which the new build does not register", len(ids), strings.Join(ids, ", "), typ, fp)
		h.Fix = "finish the rollout: the old replicas serve these sagas until they stop"
		c.r.Notices = append(c.r.Notices, h)
		return
	}
	old := c.recorded(typ, fp)
	if old == nil {
		h.Detail = fmt.Sprintf("%d live replica(s) (%s) run definition %s of %q, which is not recorded: what they can serve is unknown", len(ids), strings.Join(ids, ", "), fp, typ)
		h.Fix = "let the old replicas start once against this store (they record their definition), or stop them before the rollout"
		c.hazard(h)
		return
	}
	unknown, removed, newTypes := fleetGaps(old, m)
	h.Detail = fmt.Sprintf("%d live replica(s) (%s) run the previous definition %s of %q", len(ids), strings.Join(ids, ", "), fp, typ)
	switch {
	case len(unknown) > 0:
		h.Detail += fmt.Sprintf("; they do not know the new state(s) %s, so a saga the new build moves there waits for a new replica (given back), and is dead-lettered if the rollout outlasts the retries", strings.Join(unknown, ", "))
		h.Fix = "roll out in two steps: first a build that declares the new states without entering them, then the one that enters them"
		c.hazard(h)
	case len(removed) > 0:
		h.Detail += fmt.Sprintf("; they can still move sagas into state(s) %s, which the new build neither declares nor migrates", strings.Join(removed, ", "))
		h.Fix = "roll out in two steps: first a build that stops entering those states, then the one that removes them (or declare MigrateState for them)"
		c.hazard(h)
	case len(newTypes) > 0:
		h.Detail += fmt.Sprintf("; they do not consume the new message type(s) %s, and dead-letter one they receive as unknown_type", strings.Join(newTypes, ", "))
		h.Fix = "roll out in two steps: first a build that consumes the new types (handles or ignores them), then the one that sends or schedules them"
		c.hazard(h)
	case m.d.SchemaVersion > old.d.SchemaVersion:
		h.Detail += fmt.Sprintf("; they read schema version %d, and the new build writes %d", old.d.SchemaVersion, m.d.SchemaVersion)
		h.Fix = "roll out in two steps: first a build that can read the new schema version, then the one that writes it"
		c.hazard(h)
	default:
		h.Detail += "; they know every state and the schema version the new build writes"
		h.Fix = "none needed: finish the rollout"
		c.r.Notices = append(c.r.Notices, h)
	}
}

// fleetGaps compares an old definition that live replicas run with the
// new one: the states the new one has that the old does not know, the
// states the old can enter that the new neither declares nor migrates,
// and the message types the new one consumes that the old does not.
func fleetGaps(old, m *machine) (unknown, removed, newTypes []string) {
	for _, s := range m.d.States {
		if !old.hasState(string(s.Name)) {
			unknown = append(unknown, string(s.Name))
		}
	}
	for _, s := range old.d.States {
		if !m.hasState(string(s.Name)) && enters(old.d, s.Name) {
			removed = append(removed, string(s.Name))
		}
	}
	for ev := range m.events {
		if !old.consumes(ev) {
			newTypes = append(newTypes, ev)
		}
	}
	slices.Sort(newTypes)
	return unknown, removed, newTypes
}

// enters reports whether a transition of d leads to s.
func enters(d saga.Description, s saga.State) bool {
	return slices.ContainsFunc(d.Transitions, func(t saga.Transition) bool { return t.To == s && t.From != s })
}

// recorded returns the recorded definition fp of typ, or nil.
func (c *comparison) recorded(typ, fp string) *machine {
	for _, m := range c.old[typ] {
		if m.fp == fp {
			return m
		}
	}
	return nil
}

// sortHazards orders hs by kind, saga type, state, event.
func sortHazards(hs []Hazard) {
	slices.SortStableFunc(hs, func(a, b Hazard) int {
		return cmp.Or(strings.Compare(string(a.Kind), string(b.Kind)), strings.Compare(a.SagaType, b.SagaType),
			strings.Compare(a.State, b.State), strings.Compare(a.Event, b.Event))
	})
}

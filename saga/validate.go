package saga

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Problem is one finding of Machine.Validate.
type Problem struct {
	// Kind is "unhandled", "unreachable", "unconsumed" or "no_initial".
	Kind  string
	State State
	Event string
}

// Error describes the problem.
func (p *Problem) Error() string {
	switch p.Kind {
	case "unhandled":
		return fmt.Sprintf("state %s neither handles nor ignores event %s", p.State, p.Event)
	case "unreachable":
		return fmt.Sprintf("state %s is unreachable", p.State)
	case "unconsumed":
		return fmt.Sprintf("event %s can never start or reach a saga", p.Event)
	case "no_initial":
		return "no behaviour in Initially: no event can start a saga"
	}
	return p.Kind
}

// Validate reports, as an error joining *Problem values (nil when none):
// every (reachable non-final state, event) pair that is neither handled nor
// ignored (unless the machine uses UnhandledIgnore), every state unreachable
// from Initial, and every event that neither Initially nor any reachable
// state handles.
func (m *Machine[S]) Validate() error {
	var probs []error
	if len(m.behaviors[Initial]) == 0 {
		probs = append(probs, &Problem{Kind: "no_initial"})
	}
	reach := m.reachable()
	consumed := map[string]bool{}
	for _, s := range append([]State{Initial}, m.states...) {
		if s != Initial && !reach[s] {
			probs = append(probs, &Problem{Kind: "unreachable", State: s})
			continue
		}
		for _, ev := range m.eventOrder {
			h := m.behaviors[s][ev]
			if h != nil && !h.ignore {
				consumed[ev] = true
			}
			if s != Initial && h == nil && !m.final[s] && m.unhandled == UnhandledError {
				probs = append(probs, &Problem{Kind: "unhandled", State: s, Event: ev})
			}
		}
	}
	for _, ev := range m.eventOrder {
		if !consumed[ev] {
			probs = append(probs, &Problem{Kind: "unconsumed", Event: ev})
		}
	}
	return errors.Join(probs...)
}

func (m *Machine[S]) reachable() map[State]bool {
	seen := map[State]bool{Initial: true}
	queue := []State{Initial}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, ev := range m.eventOrder {
			h := m.behaviors[s][ev]
			if h == nil {
				continue
			}
			for _, t := range h.targets {
				if !seen[t] {
					seen[t] = true
					queue = append(queue, t)
				}
			}
		}
	}
	return seen
}

type edge struct {
	from, to State
	event    string
}

// edges lists transitions in a stable order: by source state in declaration
// order (Initial first), then by event declaration order; a handler without
// a transition is a self-loop.
func (m *Machine[S]) edges() []edge {
	var out []edge
	for _, s := range append([]State{Initial}, m.states...) {
		for _, ev := range m.eventOrder {
			h := m.behaviors[s][ev]
			if h == nil || h.ignore {
				continue
			}
			var targets []State // h.targets without repeats, in order
			for _, t := range h.targets {
				if !slices.Contains(targets, t) {
					targets = append(targets, t)
				}
			}
			if len(targets) == 0 && s != Initial {
				targets = []State{s}
			}
			for _, t := range targets {
				out = append(out, edge{from: s, to: t, event: ev})
			}
		}
	}
	return out
}

// shortEvent drops the package qualifiers of a type name, also inside the
// type arguments of a generic type: "pkg.Box[example.com/x.T]" is "Box[T]".
func shortEvent(ev string) string {
	var b strings.Builder
	for ev != "" {
		i := strings.IndexAny(ev, "[],")
		if i < 0 {
			i = len(ev)
		}
		name := ev[:i]
		if j := strings.LastIndexByte(name, '.'); j >= 0 {
			name = name[j+1:]
		}
		b.WriteString(name)
		if i < len(ev) {
			b.WriteByte(ev[i])
			i++
		}
		ev = ev[i:]
	}
	return b.String()
}

// Mermaid returns the machine as a Mermaid stateDiagram-v2.
func (m *Machine[S]) Mermaid() string {
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	for _, e := range m.edges() {
		from := string(e.from)
		if e.from == Initial {
			from = "[*]"
		}
		fmt.Fprintf(&b, "    %s --> %s: %s\n", from, e.to, shortEvent(e.event))
	}
	for _, s := range m.states {
		if m.final[s] {
			fmt.Fprintf(&b, "    %s --> [*]\n", s)
		}
	}
	return b.String()
}

// DOT returns the machine as a Graphviz digraph.
func (m *Machine[S]) DOT() string {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %q {\n    rankdir=LR;\n    %q [shape=point];\n", m.name, Initial)
	for _, s := range m.states {
		shape := "box"
		if m.final[s] {
			shape = "doublecircle"
		}
		fmt.Fprintf(&b, "    %q [shape=%s];\n", s, shape)
	}
	for _, e := range m.edges() {
		fmt.Fprintf(&b, "    %q -> %q [label=%q];\n", e.from, e.to, shortEvent(e.event))
	}
	b.WriteString("}\n")
	return b.String()
}

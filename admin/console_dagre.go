package admin

import (
	"encoding/json"
	"fmt"

	"github.com/idemhq/idem/saga"
)

// The Saga types page draws each machine in the browser: the server
// renders the machine's states and transitions as JSON in the diagram's
// data-graph attribute (escaped by html/template like any attribute), and
// admin/assets/diagram.js lays it out with the vendored dagre
// (admin/assets/dagre.min.js) and draws the SVG with DOM calls only, so a
// state or event name is never parsed as markup. Without JavaScript the
// page lists the same transitions in a table.

// diagramGraph is what diagram.js lays out and draws.
type diagramGraph struct {
	Nodes []diagramNode `json:"nodes"`
	Edges []diagramEdge `json:"edges"`
}

// diagramNode is one state, or the Initial dot.
type diagramNode struct {
	ID      string `json:"id"` // n0 is Initial, then n1, n2… in the machine's order
	Name    string `json:"name"`
	Count   int    `json:"count"`
	Href    string `json:"href,omitempty"` // the instances in this state
	Final   bool   `json:"final,omitempty"`
	Initial bool   `json:"initial,omitempty"`
}

// diagramEdge is every transition from one state to another, merged: its
// label has one line per event, and its title lists them all.
type diagramEdge struct {
	From  string   `json:"from"`
	To    string   `json:"to"`
	Lines []string `json:"lines"`
	Title string   `json:"title"`
	// events are the labels added, whole.
	events []string
}

// labelRunes bounds a label line; the edge's title has the event whole.
const labelRunes = 40

// layout is the data-graph attribute of the machine t describes: its
// states with their counts and links, and its transitions. base is the
// console's path prefix.
func layout(base string, t *SagaType) (string, error) {
	b, err := json.Marshal(machineGraph(base, t))
	if err != nil {
		return "", fmt.Errorf("diagram of saga type %s: %w", t.Name, err)
	}
	return string(b), nil
}

func machineGraph(base string, t *SagaType) diagramGraph {
	g := diagramGraph{Nodes: []diagramNode{{ID: "n0", Name: string(saga.Initial), Initial: true}}, Edges: []diagramEdge{}}
	ids := map[string]string{string(saga.Initial): "n0"}
	for _, s := range t.States {
		id := fmt.Sprintf("n%d", len(g.Nodes))
		ids[s.Name] = id
		g.Nodes = append(g.Nodes, diagramNode{ID: id, Name: s.Name, Count: s.Count, Final: s.Final,
			Href: base + "/instances" + query("type", t.Name, "state", s.Name)})
	}
	merged := map[[2]string]int{}
	for _, e := range t.Edges {
		from, okFrom := ids[string(e.From)]
		to, okTo := ids[string(e.To)]
		if !okFrom || !okTo {
			continue
		}
		i, ok := merged[[2]string{from, to}]
		if !ok {
			i = len(g.Edges)
			merged[[2]string{from, to}] = i
			g.Edges = append(g.Edges, diagramEdge{From: from, To: to})
		}
		g.Edges[i].add(e.Label)
	}
	return g
}

// add puts one more event on e's label, once.
func (e *diagramEdge) add(label string) {
	for _, l := range e.events {
		if l == label {
			return
		}
	}
	e.events = append(e.events, label)
	e.Lines = append(e.Lines, shorten(label, labelRunes))
	if e.Title != "" {
		e.Title += ", "
	}
	e.Title += label
}

// shorten truncates s to n runes with an ellipsis.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

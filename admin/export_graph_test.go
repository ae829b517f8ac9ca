package admin

import (
	"context"

	"github.com/idemhq/idem/saga"
)

// Box is an axis-aligned rectangle of a laid-out diagram, in SVG user units
// (y grows downwards).
type Box struct{ X, Y, W, H float64 }

// Point is a point of a laid-out diagram.
type Point struct{ X, Y float64 }

// GeomNode is one state of a laid-out diagram; Round marks the Initial dot
// (a circle inscribed in Box).
type GeomNode struct {
	Name  string
	Box   Box
	Round bool
}

// GeomEdge is one drawn edge: the points of its path in order (the first is
// where it leaves From, the last is its arrow's tip), and its label's box.
type GeomEdge struct {
	From, To string
	Points   []Point
	Label    Box
	Text     string
}

// Geometry is what the diagram of a machine draws, for tests.
type Geometry struct {
	ViewBox Box
	Nodes   []GeomNode
	Edges   []GeomEdge
}

// LayoutGraph lays out the machine g as the Saga types page draws it.
func LayoutGraph(g saga.Graph) (Geometry, error) {
	st := &SagaType{Name: g.Name, Edges: g.Edges}
	for _, s := range g.States {
		st.States = append(st.States, SagaTypeState{Name: string(s.Name), Final: s.Final})
	}
	d, err := layout(st)
	if err != nil {
		return Geometry{}, err
	}
	out := Geometry{ViewBox: Box{0, 0, d.Width, d.Height}}
	for _, n := range d.Nodes {
		out.Nodes = append(out.Nodes, GeomNode{Name: n.Name, Round: n.Initial, Box: Box{n.X, n.Y, n.W, n.H}})
	}
	for _, e := range d.Edges {
		ge := GeomEdge{From: e.From, To: e.To, Text: e.Title, Label: Box(e.Label)}
		for _, p := range e.Points {
			ge.Points = append(ge.Points, Point(p))
		}
		out.Edges = append(out.Edges, ge)
	}
	return out, nil
}

// LayoutUncached runs dot on g, bypassing the cache of laid-out machines.
func LayoutUncached(g saga.Graph) error {
	st := &SagaType{Name: g.Name, Edges: g.Edges}
	for _, s := range g.States {
		st.States = append(st.States, SagaTypeState{Name: string(s.Name), Final: s.Final})
	}
	layouts.mu.Lock()
	defer layouts.mu.Unlock()
	_, err := runDot(context.Background(), st)
	return err
}

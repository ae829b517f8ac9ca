package admin_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/ingestor/ingest"
	"github.com/idemhq/idem/saga"
)

// tipTolerance is how far, in SVG units, an edge may start or end from its
// node's outline: the rounded corners of a state's box are up to 3 units
// inside its rectangle.
const tipTolerance = 4.0

// labelReach is how far a label's box may be from its edge's curve.
const labelReach = 8.0

// searchimportGraph is the machine of cmd/idem's demo/searchimport (5
// states, 17 transitions), kept as testdata since an internal package of
// another module cannot be imported here. Regenerate it with
// json.MarshalIndent(searchimport.New(searchimport.Config{}).Machine.Graph(), "", "  ").
func searchimportGraph(t *testing.T) saga.Graph {
	t.Helper()
	b, err := os.ReadFile("testdata/graph_searchimport.json")
	if err != nil {
		t.Fatal(err)
	}
	var g saga.Graph
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.States) != 5 || len(g.Edges) != 17 {
		t.Fatalf("searchimport testdata: %d states, %d transitions, want 5 and 17", len(g.States), len(g.Edges))
	}
	return g
}

// TestDiagramGeometry lays out real machines and checks what an operator
// reads: labels apart, every edge leaving its source's outline and ending,
// arrow tip first, on its target's, and nothing outside the viewBox.
func TestDiagramGeometry(t *testing.T) {
	t.Parallel()
	const hostile = "Done\x00\xff<script>\\N\"}"
	// opposite has two opposite edges, a self-loop, and names that would
	// break DOT or the page if they reached either unescaped.
	opposite := saga.Graph{Name: "ping", States: []saga.GraphState{{Name: "A"}, {Name: "B"}, {Name: hostile, Final: true}},
		Edges: []saga.GraphEdge{{From: saga.Initial, To: "A", Label: "Start"}, {From: "A", To: "B", Label: "Ping"},
			{From: "B", To: "A", Label: "Pong"}, {From: "B", To: "B", Label: "Again"}, {From: "B", To: hostile, Label: "Stop\"; x -> y [label=\\N"}}}
	for name, g := range map[string]saga.Graph{"searchimport": searchimportGraph(t), "ingestor.job": ingest.JobMachine().Graph(), "opposite": opposite} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			geo, err := admin.LayoutGraph(g)
			if err != nil {
				t.Fatal(err)
			}
			checkGeometry(t, g, geo)
		})
	}
}

func checkGeometry(t *testing.T, g saga.Graph, geo admin.Geometry) {
	t.Helper()
	nodes := map[string]admin.GeomNode{}
	for _, n := range geo.Nodes {
		nodes[n.Name] = n
		inside(t, geo.ViewBox, n.Box, "state "+n.Name)
	}
	if len(geo.Nodes) != len(g.States)+1 {
		t.Errorf("%d nodes drawn, want the %d states and Initial", len(geo.Nodes), len(g.States))
	}
	pairs := map[[2]string]bool{}
	for _, e := range g.Edges {
		pairs[[2]string{string(e.From), string(e.To)}] = true
	}
	if len(geo.Edges) != len(pairs) {
		t.Errorf("%d edges drawn, want one per pair of states: %d", len(geo.Edges), len(pairs))
	}
	for i, e := range geo.Edges {
		name := fmt.Sprintf("edge %s → %s (%s)", e.From, e.To, e.Text)
		if len(e.Points) < 2 {
			t.Errorf("%s: path has %d points", name, len(e.Points))
			continue
		}
		if d := outlineDistance(nodes[e.From], e.Points[0]); d > tipTolerance {
			t.Errorf("%s: starts %.1f units from %s's outline, at %v (box %v)", name, d, e.From, e.Points[0], nodes[e.From].Box)
		}
		tip := e.Points[len(e.Points)-1]
		if d := outlineDistance(nodes[e.To], tip); d > tipTolerance {
			t.Errorf("%s: ends %.1f units from %s's outline, at %v (box %v)", name, d, e.To, tip, nodes[e.To].Box)
		}
		for _, p := range e.Points {
			inside(t, geo.ViewBox, admin.Box{X: p.X, Y: p.Y}, name+" path")
		}
		inside(t, geo.ViewBox, e.Label, name+" label")
		curve := sample(e.Points)
		if d := boxDistance(e.Label, curve); d > labelReach {
			t.Errorf("%s: label %v is %.1f units from its edge", name, e.Label, d)
		}
		for _, o := range geo.Edges[i+1:] {
			if o.From == e.To && o.To == e.From && e.From != e.To {
				a, b := curve[len(curve)/2], sample(o.Points)[len(sample(o.Points))/2]
				if math.Hypot(a.X-b.X, a.Y-b.Y) < 10 {
					t.Errorf("%s and its opposite edge are drawn over each other (midpoints %v, %v)", name, a, b)
				}
			}
			if overlap(e.Label, o.Label) {
				t.Errorf("labels overlap: %q at %v and %q at %v", e.Text, e.Label, o.Text, o.Label)
			}
		}
	}
}

func inside(t *testing.T, vb, b admin.Box, what string) {
	t.Helper()
	if b.X < vb.X || b.Y < vb.Y || b.X+b.W > vb.X+vb.W || b.Y+b.H > vb.Y+vb.H {
		t.Errorf("%s at %v is cut off by the viewBox %v", what, b, vb)
	}
}

func overlap(a, b admin.Box) bool {
	return a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
}

// outlineDistance is how far p is from n's outline: its circle for the
// Initial dot, its rectangle for a state.
func outlineDistance(n admin.GeomNode, p admin.Point) float64 {
	b := n.Box
	if n.Round {
		return math.Abs(math.Hypot(p.X-(b.X+b.W/2), p.Y-(b.Y+b.H/2)) - b.W/2)
	}
	dx := math.Max(b.X-p.X, p.X-(b.X+b.W))
	dy := math.Max(b.Y-p.Y, p.Y-(b.Y+b.H))
	if dx > 0 || dy > 0 { // outside
		return math.Hypot(math.Max(dx, 0), math.Max(dy, 0))
	}
	return math.Min(-dx, -dy) // inside: to the nearest side
}

// sample walks a path of cubic Bézier segments (a start point, then three
// points per segment) and an optional final straight line, 16 points per
// segment.
func sample(pts []admin.Point) []admin.Point {
	out := []admin.Point{pts[0]}
	i := 1
	for ; i+2 < len(pts); i += 3 {
		p0, p1, p2, p3 := pts[i-1], pts[i], pts[i+1], pts[i+2]
		for k := 1; k <= 16; k++ {
			u := float64(k) / 16
			a, b, c, d := (1-u)*(1-u)*(1-u), 3*u*(1-u)*(1-u), 3*u*u*(1-u), u*u*u
			out = append(out, admin.Point{X: a*p0.X + b*p1.X + c*p2.X + d*p3.X, Y: a*p0.Y + b*p1.Y + c*p2.Y + d*p3.Y})
		}
	}
	return append(out, pts[i:]...)
}

// boxDistance is the distance from b to the nearest of pts.
func boxDistance(b admin.Box, pts []admin.Point) float64 {
	best := math.Inf(1)
	for _, p := range pts {
		dx := math.Max(math.Max(b.X-p.X, p.X-(b.X+b.W)), 0)
		dy := math.Max(math.Max(b.Y-p.Y, p.Y-(b.Y+b.H)), 0)
		best = math.Min(best, math.Hypot(dx, dy))
	}
	return best
}

// TestSearchimportShape checks that the browser test's stand-in for
// searchimport has the real machine's transitions.
func TestSearchimportShape(t *testing.T) {
	t.Parallel()
	want, got := searchimportGraph(t), searchimportShape().Graph()
	if len(got.Edges) != len(want.Edges) {
		t.Fatalf("%d transitions, want %d: %v", len(got.Edges), len(want.Edges), got.Edges)
	}
	for i, e := range want.Edges {
		g := got.Edges[i]
		if g.From != e.From || g.To != e.To || g.Label != e.Label {
			t.Errorf("transition %d: %s → %s (%s), want %s → %s (%s)", i, g.From, g.To, g.Label, e.From, e.To, e.Label)
		}
	}
}

// BenchmarkDiagramLayout measures one run of dot (the page caches each
// machine's layout, so a process pays it once per machine).
func BenchmarkDiagramLayout(b *testing.B) {
	for name, g := range map[string]saga.Graph{"searchimport": searchimportShape().Graph(), "ingestor.job": ingest.JobMachine().Graph()} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := admin.LayoutUncached(g); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

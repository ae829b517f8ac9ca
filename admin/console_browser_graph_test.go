package admin_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/idemhq/idem/examples/ingestor/ingest"
	"github.com/idemhq/idem/saga"
)

// hostileState is a state name that would run if the diagram rendered it
// unescaped.
const hostileState = `<script>alert("state")</script>`

type pingPong struct{ Pings int }

type pingStarted struct{ ID string }

type pinged struct{ ID string }

type ponged struct{ ID string }

// pingPongMachine has two opposite transitions between one pair of states
// (A → B on pinged, B → A on ponged), a self-loop and a hostile state name.
func pingPongMachine() *saga.Machine[pingPong] {
	m := saga.New[pingPong]("pingpong")
	a, b, hostile := m.State("A"), m.State("B"), m.Final(hostileState)
	start := saga.NewEvent[pingStarted](m, func(e pingStarted) string { return e.ID })
	ping := saga.NewEvent[pinged](m, func(e pinged) string { return e.ID })
	pong := saga.NewEvent[ponged](m, func(e ponged) string { return e.ID })
	m.Initially(saga.When(start).TransitionTo(a))
	m.During(a, saga.Ignore(start), saga.When(ping).TransitionTo(b), saga.When(pong).TransitionTo(hostile))
	m.During(b, saga.Ignore(start), saga.When(pong).TransitionTo(a), saga.When(ping).Then(func(c *saga.Context[pingPong], _ pinged) error {
		c.Data.Pings++
		return nil
	}))
	return m
}

type (
	SearchUploadStarted           struct{ ID string }
	SearchUploadSaved             struct{ ID string }
	ReferenceFileParsingCompleted struct{ ID string }
	ReferenceFileFaulted          struct{ ID string }
	StartParsingFaulted           struct{ ID string }
	UploadTimeout                 struct{ ID string }
)

// searchimportShape is a machine with the states and transitions of cmd/idem's
// demo/searchimport (which this module cannot import): 5 states, 17
// transitions, three self-loops and two-way branches.
func searchimportShape() *saga.Machine[pingPong] {
	m := saga.New[pingPong]("searchimport")
	uploading, uploaded, parsing := m.State("Uploading"), m.State("Uploaded"), m.State("Parsing")
	completed, failed := m.Final("Completed"), m.Final("Error")
	id := func(s string) string { return s }
	started := saga.NewEvent[SearchUploadStarted](m, func(e SearchUploadStarted) string { return id(e.ID) })
	saved := saga.NewEvent[SearchUploadSaved](m, func(e SearchUploadSaved) string { return id(e.ID) })
	parsed := saga.NewEvent[ReferenceFileParsingCompleted](m, func(e ReferenceFileParsingCompleted) string { return id(e.ID) })
	fileFaulted := saga.NewEvent[ReferenceFileFaulted](m, func(e ReferenceFileFaulted) string { return id(e.ID) })
	startFaulted := saga.NewEvent[StartParsingFaulted](m, func(e StartParsingFaulted) string { return id(e.ID) })
	timedOut := saga.NewEvent[UploadTimeout](m, func(e UploadTimeout) string { return id(e.ID) })
	yes := func(*saga.Context[pingPong], SearchUploadSaved) bool { return true }
	done := func(*saga.Context[pingPong], ReferenceFileParsingCompleted) bool { return true }
	stay := func(*saga.Context[pingPong], SearchUploadStarted) error { return nil }
	to := func(s saga.State) func(*saga.Activity[pingPong, SearchUploadSaved]) *saga.Activity[pingPong, SearchUploadSaved] {
		return func(b *saga.Activity[pingPong, SearchUploadSaved]) *saga.Activity[pingPong, SearchUploadSaved] {
			return b.TransitionTo(s)
		}
	}
	toP := func(s saga.State) func(*saga.Activity[pingPong, ReferenceFileParsingCompleted]) *saga.Activity[pingPong, ReferenceFileParsingCompleted] {
		return func(b *saga.Activity[pingPong, ReferenceFileParsingCompleted]) *saga.Activity[pingPong, ReferenceFileParsingCompleted] {
			return b.TransitionTo(s)
		}
	}
	m.Initially(saga.When(started).TransitionTo(uploading), saga.When(saved).IfElse(yes, to(uploaded), to(failed)))
	m.During(uploading, saga.When(started).Then(stay), saga.When(saved).IfElse(yes, to(uploaded), to(failed)),
		saga.When(timedOut).TransitionTo(failed))
	m.During(uploaded, saga.When(started).Then(stay), saga.When(parsed).IfElse(done, toP(completed), toP(parsing)),
		saga.When(fileFaulted).TransitionTo(failed), saga.When(startFaulted).TransitionTo(failed))
	m.During(parsing, saga.When(started).Then(stay), saga.When(parsed).IfElse(done, toP(completed), toP(parsing)),
		saga.When(fileFaulted).TransitionTo(failed), saga.When(startFaulted).TransitionTo(failed))
	return m
}

// tipTolerance is how far, in SVG units, an edge may start or end from its
// state's outline: the rounded corners of a state's box are up to 3 units
// inside its rectangle.
const tipTolerance = 4.0

// labelReach is how far a label's box may be from its edge's curve.
const labelReach = 8.0

type box struct{ X, Y, W, H float64 }

type pt struct{ X, Y float64 }

// drawn is what the browser reports of one diagram.
type drawn struct {
	Edges []struct {
		From, To, Marker, D, Text string
		Label                     box
		Points                    []pt // along the path, from its start to its end
		Length                    float64
	}
	Nodes []struct {
		Name, Text, Shown string // Shown is the name as drawn
		Box               box
		Round             bool
	}
	VB      box
	Foreign []string // elements the drawing does not make
}

// readDiagram measures a drawn diagram with getBBox and the path API.
const readDiagram = `(() => {
  const s = document.getElementById(%q).querySelector(".diagram svg");
  const bb = el => { const b = el.getBBox(); return {x: b.x, y: b.y, w: b.width, h: b.height}; };
  const along = p => { const n = p.getTotalLength(); return [...Array(65).keys()].map(i => { const q = p.getPointAtLength(n * i / 64); return {x: q.x, y: q.y}; }); };
  const vb = s.viewBox.baseVal;
  return {
    edges: [...s.querySelectorAll("g.edge")].map(g => { const p = g.querySelector("path"), t = g.querySelector("text");
      return {from: g.dataset.from, to: g.dataset.to, marker: p.getAttribute("marker-end") || "", d: p.getAttribute("d"),
        text: t.textContent, label: bb(t), points: along(p), length: p.getTotalLength()}; }),
    nodes: [...s.querySelectorAll("g.node")].map(g => ({name: g.dataset.state, text: g.textContent,
      shown: g.querySelector("text.name")?.textContent || "", box: bb(g.querySelector("rect, circle")), round: !!g.querySelector("circle")})),
    foreign: [...s.querySelectorAll(":not(defs, marker, g, a, title, path, rect, circle, text, tspan)")].map(e => e.tagName),
    vb: {x: vb.x, y: vb.y, w: vb.width, h: vb.height},
  };
})()`

// TestBrowserDiagramArrows renders the Saga types page, reached through the
// console's (htmx-boosted) navigation, and checks from what the browser
// measured that every transition is an arrowed path from its source's
// outline to its target's, with its label on it; that opposite transitions
// are two paths and a self-loop is drawn; that no label covers another
// label or a state; that the viewBox holds everything; and that a hostile
// state name stays text.
func TestBrowserDiagramArrows(t *testing.T) {
	t.Parallel()
	machines := map[string]saga.Graph{"pingpong": pingPongMachine().Graph(), "ingestor.job": ingest.JobMachine().Graph(), "searchimport": searchimportShape().Graph()}
	b := setupWith(t, nil, 0, pingPongMachine(), ingest.JobMachine(), searchimportShape())
	ctx, dialog := chrome(t)
	run(t, ctx, "saga types", chromedp.Navigate(b.srv.URL+"/"), chromedp.WaitVisible("#overview"),
		click(`header nav a[href$="/sagas"]`), chromedp.WaitVisible(`#type-pingpong .diagram svg .node`),
		chromedp.WaitVisible(`#type-searchimport .diagram svg .node`))
	for name, g := range machines {
		var d drawn
		run(t, ctx, "read "+name, chromedp.Evaluate(fmt.Sprintf(readDiagram, "type-"+name), &d))
		checkDrawn(t, name, g, d)
		if name == "pingpong" {
			checkOpposite(t, d)
		}
	}
	if dialog.Load() {
		t.Error("a JavaScript dialog opened: a state name ran as script")
	}
	screenshot(t, ctx, "diagram-pingpong")
	dir := os.Getenv("IDEM_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	var png []byte
	// Let the diagram grow past the page's width for the picture.
	widen := `for (let e = document.querySelector("#type-searchimport .diagram"); e; e = e.parentElement) { e.style.maxWidth = "none"; e.style.width = "max-content"; }`
	run(t, ctx, "screenshot searchimport", chromedp.EmulateViewport(1800, 900), chromedp.Evaluate(widen, nil), chromedp.Screenshot(`#type-searchimport .diagram svg`, &png))
	if err := os.WriteFile(filepath.Join(dir, "diagram-searchimport.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBrowserDiagramWithoutJavaScript checks that with scripts disabled
// the Saga types page hides the empty diagram and shows every transition in
// the table, the hostile state name as text.
func TestBrowserDiagramWithoutJavaScript(t *testing.T) {
	t.Parallel()
	b := setupWith(t, nil, 0, pingPongMachine())
	ctx, _ := chrome(t)
	var rows []string
	var shown bool
	run(t, ctx, "saga types", emulation.SetScriptExecutionDisabled(true), chromedp.Navigate(b.srv.URL+"/sagas"),
		chromedp.WaitVisible(`#type-pingpong details.transitions table`),
		chromedp.Evaluate(`[...document.querySelectorAll("#type-pingpong details.transitions tbody tr")].map(r => r.innerText.replaceAll("\t", " "))`, &rows),
		chromedp.Evaluate(`!!document.querySelector("#type-pingpong .diagram").offsetParent`, &shown))
	want := []string{"Initial pingStarted A", "A pinged B", "A ponged " + hostileState, "B pinged B", "B ponged A"}
	slices.Sort(rows)
	slices.Sort(want)
	if !slices.Equal(rows, want) {
		t.Errorf("the transitions table shows %q, want %q", rows, want)
	}
	if shown {
		t.Error("the empty diagram box is shown without JavaScript")
	}
}

func checkDrawn(t *testing.T, typ string, g saga.Graph, d drawn) {
	t.Helper()
	pairs := map[[2]string]bool{}
	for _, e := range g.Edges {
		pairs[[2]string{string(e.From), string(e.To)}] = true
	}
	if len(d.Edges) != len(pairs) || len(d.Nodes) != len(g.States)+1 {
		t.Fatalf("%s: %d edges and %d states drawn, want one edge per pair of states (%d) and the %d states and Initial", typ, len(d.Edges), len(d.Nodes), len(pairs), len(g.States))
	}
	if len(d.Foreign) > 0 {
		t.Errorf("%s: the diagram holds elements it does not draw: %q", typ, d.Foreign)
	}
	nodes := map[string]box{}
	round := map[string]bool{}
	for _, n := range d.Nodes {
		if !n.Round && n.Shown != n.Name {
			t.Errorf("%s: state %q is shown as %q", typ, n.Name, n.Shown)
		}
		nodes[n.Name], round[n.Name] = n.Box, n.Round
		inside(t, typ, d.VB, n.Box, "state "+n.Name)
	}
	for i, e := range d.Edges {
		name := fmt.Sprintf("%s: edge %s → %s (%s)", typ, e.From, e.To, e.Text)
		if !pairs[[2]string{e.From, e.To}] {
			t.Errorf("%s is not a transition of the machine", name)
		}
		if e.Marker == "" {
			t.Errorf("%s has no arrowhead", name)
		}
		if dist := outlineDistance(nodes[e.From], round[e.From], e.Points[0]); dist > tipTolerance {
			t.Errorf("%s starts %.1f units from %s's outline, at %v (box %v)", name, dist, e.From, e.Points[0], nodes[e.From])
		}
		tip := e.Points[len(e.Points)-1]
		if dist := outlineDistance(nodes[e.To], round[e.To], tip); dist > tipTolerance {
			t.Errorf("%s ends %.1f units from %s's outline, at %v (box %v)", name, dist, e.To, tip, nodes[e.To])
		}
		if dist := boxDistance(e.Label, e.Points); dist > labelReach {
			t.Errorf("%s: label %v is %.1f units from its edge", name, e.Label, dist)
		}
		inside(t, typ, d.VB, e.Label, name+" label")
		for _, p := range e.Points {
			inside(t, typ, d.VB, box{X: p.X, Y: p.Y}, name+" path")
		}
		for _, o := range d.Edges[i+1:] {
			if overlap(e.Label, o.Label) {
				t.Errorf("%s: labels overlap: %q at %v and %q at %v", typ, e.Text, e.Label, o.Text, o.Label)
			}
		}
		for _, n := range d.Nodes {
			if overlap(e.Label, n.Box) {
				t.Errorf("%s: its label %v covers state %s %v", name, e.Label, n.Name, n.Box)
			}
		}
	}
}

func checkOpposite(t *testing.T, d drawn) {
	t.Helper()
	paths := map[string][]pt{}
	length := map[string]float64{}
	for _, e := range d.Edges {
		paths[e.From+"→"+e.To], length[e.From+"→"+e.To] = e.Points, e.Length
	}
	ab, ba := paths["A→B"], paths["B→A"]
	if ab == nil || ba == nil {
		t.Fatalf("A → B and B → A are not both drawn (edges %v)", d.Edges)
	}
	if a, b := ab[len(ab)/2], ba[len(ba)/2]; math.Hypot(a.X-b.X, a.Y-b.Y) < 10 {
		t.Errorf("A → B and B → A are drawn over each other (midpoints %v, %v)", a, b)
	}
	if length["B→B"] < 20 {
		t.Errorf("the self-loop B → B is not drawn: its path is %.1f units long (edges %v)", length["B→B"], d.Edges)
	}
	var names []string
	for _, n := range d.Nodes {
		names = append(names, n.Shown)
	}
	if !slices.Contains(names, hostileState) {
		t.Errorf("the hostile state name is not shown as text: %q", names)
	}
}

func inside(t *testing.T, typ string, vb, b box, what string) {
	t.Helper()
	if b.X < vb.X || b.Y < vb.Y || b.X+b.W > vb.X+vb.W || b.Y+b.H > vb.Y+vb.H {
		t.Errorf("%s: %s at %v is cut off by the viewBox %v", typ, what, b, vb)
	}
}

func overlap(a, b box) bool {
	return a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
}

// outlineDistance is how far p is from a state's outline: its circle for
// the Initial dot, its rectangle for a state.
func outlineDistance(b box, round bool, p pt) float64 {
	if round {
		return math.Abs(math.Hypot(p.X-(b.X+b.W/2), p.Y-(b.Y+b.H/2)) - b.W/2)
	}
	dx := math.Max(b.X-p.X, p.X-(b.X+b.W))
	dy := math.Max(b.Y-p.Y, p.Y-(b.Y+b.H))
	if dx > 0 || dy > 0 { // outside
		return math.Hypot(math.Max(dx, 0), math.Max(dy, 0))
	}
	return math.Min(-dx, -dy) // inside: to the nearest side
}

// boxDistance is the distance from b to the nearest of pts.
func boxDistance(b box, pts []pt) float64 {
	best := math.Inf(1)
	for _, p := range pts {
		dx := math.Max(math.Max(b.X-p.X, p.X-(b.X+b.W)), 0)
		dy := math.Max(math.Max(b.Y-p.Y, p.Y-(b.Y+b.H)), 0)
		best = math.Min(best, math.Hypot(dx, dy))
	}
	return best
}

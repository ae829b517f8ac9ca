package admin_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

// drawn is what the browser reports of one diagram.
type drawn struct {
	Edges []struct {
		From, To, Marker, D string
	}
	Labels []struct {
		Text       string
		X, Y, W, H float64
	}
	Nodes []struct {
		Text       string
		X, Y, W, H float64
	}
	VB struct{ X, Y, W, H float64 }
}

const readDiagram = `(() => {
  const s = document.getElementById(%q).querySelector(".diagram svg");
  const box = el => { const b = el.getBBox(); return {text: el.textContent, x: b.x, y: b.y, w: b.width, h: b.height}; };
  const vb = s.viewBox.baseVal;
  return {
    edges: [...s.querySelectorAll("g.edge")].map(g => ({from: g.dataset.from, to: g.dataset.to,
      marker: g.querySelector("path").getAttribute("marker-end") || "", d: g.querySelector("path").getAttribute("d")})),
    labels: [...s.querySelectorAll("g.edge text")].map(box),
    nodes: [...s.querySelectorAll("g.node")].map(box),
    vb: {x: vb.x, y: vb.y, w: vb.width, h: vb.height},
  };
})()`

// TestBrowserDiagramArrows renders the Saga types page and checks, from the
// boxes the browser measured, that opposite transitions are two arrowed
// paths, that no two labels overlap, that the viewBox holds every label and
// state, and that a hostile state name stays text.
func TestBrowserDiagramArrows(t *testing.T) {
	t.Parallel()
	b := setupWith(t, nil, 0, pingPongMachine(), ingest.JobMachine(), searchimportShape())
	ctx, dialog := chrome(t)
	run(t, ctx, "saga types", chromedp.Navigate(b.srv.URL+"/sagas"), chromedp.WaitVisible(`#type-pingpong .diagram svg .node`))
	for _, typ := range []string{"type-pingpong", "type-ingestor.job", "type-searchimport"} {
		var d drawn
		run(t, ctx, "read "+typ, chromedp.Evaluate(fmt.Sprintf(readDiagram, typ), &d))
		checkDrawn(t, typ, d)
		if typ == "type-pingpong" {
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

func checkDrawn(t *testing.T, typ string, d drawn) {
	t.Helper()
	if len(d.Edges) == 0 || len(d.Labels) != len(d.Edges) {
		t.Fatalf("%s: %d edges and %d labels drawn", typ, len(d.Edges), len(d.Labels))
	}
	for i, l := range d.Labels {
		for _, o := range d.Labels[i+1:] {
			if l.X < o.X+o.W && o.X < l.X+l.W && l.Y < o.Y+o.H && o.Y < l.Y+l.H {
				t.Errorf("%s: labels %q %v and %q %v overlap", typ, l.Text, l, o.Text, o)
			}
		}
	}
	for _, l := range append(d.Labels, d.Nodes...) {
		if l.X < d.VB.X || l.Y < d.VB.Y || l.X+l.W > d.VB.X+d.VB.W || l.Y+l.H > d.VB.Y+d.VB.H {
			t.Errorf("%s: %q at %v is cut off by the viewBox %v", typ, l.Text, l, d.VB)
		}
	}
	for _, e := range d.Edges {
		if e.Marker == "" {
			t.Errorf("%s: edge %s → %s has no arrowhead", typ, e.From, e.To)
		}
	}
}

func checkOpposite(t *testing.T, d drawn) {
	t.Helper()
	paths := map[string]string{}
	for _, e := range d.Edges {
		paths[e.From+"→"+e.To] = e.D
	}
	ab, ba := paths["A→B"], paths["B→A"]
	if ab == "" || ba == "" || ab == ba {
		t.Errorf("A → B and B → A are not two paths: %q and %q (edges %v)", ab, ba, d.Edges)
	}
	if paths["B→B"] == "" {
		t.Errorf("the self-loop B → B is not drawn (edges %v)", d.Edges)
	}
	var names []string
	for _, n := range d.Nodes {
		names = append(names, n.Text)
	}
	if !strings.Contains(strings.Join(names, "\n"), hostileState) {
		t.Errorf("the hostile state name is not shown as text: %q", names)
	}
}

package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/goccy/go-graphviz"

	"github.com/idemhq/idem/saga"
)

// diagram is a machine laid out by Graphviz's dot for the SVG template, in
// SVG user units (y grows downwards). Its viewBox is 0 0 Width Height and
// holds every node, edge and label.
type diagram struct {
	Width, Height float64
	Nodes         []dnode
	Edges         []dedge
}

type dnode struct {
	X, Y, W, H     float64
	CX, CY         float64
	NameY, CountY  float64 // baselines of the name and the count
	Inner          dbox    // a final state's inner outline
	Name           string
	Count          int
	Final, Initial bool
}

// dedge is every transition from one state to another, merged: its label
// has one line per event.
type dedge struct {
	From, To string
	// Path is the SVG path: dot's cubic Bézier spline, then a line to the
	// arrow's tip on the target's outline.
	Path   string
	Points []point
	// Label is the box the label's lines are centred in, around LX.
	Label dbox
	LX    float64
	Lines []dline
	Title string
}

type point struct{ X, Y float64 }

type dbox struct{ X, Y, W, H float64 }

type dline struct {
	Y    float64
	Text string
}

// Sizes in SVG units. Label text is 11px monospace: dot is told it is 11pt
// Courier, whose every glyph it measures as 0.6em, and one unit is one point.
const (
	nodeH       = 46
	initialSize = 18
	charW       = 6.6  // an 11px monospace glyph
	lineH       = 13.2 // one label line
	labelRunes  = 40   // longer event names are shortened (the title has them whole)
	margin      = 8
	pointsPerIn = 72
)

func nodeWidth(name string) float64 { return float64(max(112, 8*utf8.RuneCountInString(name)+32)) }

// layouts caches each machine's geometry: a machine is fixed once
// registered, so dot runs once per machine and process. Graphviz's
// WebAssembly module is not safe for concurrent use; mu serialises it.
var layouts struct {
	mu    sync.Mutex
	gv    *graphviz.Graphviz
	cache map[string]*diagram
}

// layout is the diagram of the machine t describes, with t's instance
// counts.
func layout(t *SagaType) (*diagram, error) {
	key := graphKey(t)
	layouts.mu.Lock()
	d, ok := layouts.cache[key]
	if !ok {
		var err error
		if d, err = runDot(context.Background(), t); err != nil {
			layouts.mu.Unlock()
			return nil, fmt.Errorf("lay out saga type %s: %w", t.Name, err)
		}
		if layouts.cache == nil {
			layouts.cache = map[string]*diagram{}
		}
		layouts.cache[key] = d
	}
	layouts.mu.Unlock()
	counts := map[string]int{}
	for _, s := range t.States {
		counts[s.Name] = s.Count
	}
	out := *d
	out.Nodes = append([]dnode(nil), d.Nodes...)
	for i := range out.Nodes {
		out.Nodes[i].Count = counts[out.Nodes[i].Name]
	}
	return &out, nil
}

// graphKey identifies a machine's shape: its name, states and
// transitions, without the counts.
func graphKey(t *SagaType) string {
	var sb strings.Builder
	sb.WriteString(strconv.Quote(t.Name))
	for _, s := range t.States {
		fmt.Fprintf(&sb, " %q:%t", s.Name, s.Final)
	}
	for _, e := range t.Edges {
		fmt.Fprintf(&sb, " %q>%q:%q", e.From, e.To, e.Label)
	}
	return sb.String()
}

// shape is a machine reduced to what dot lays out: nodes by index (0 is
// Initial) and merged edges.
type shape struct {
	nodes []dnode
	edges []dedge
}

func shapeOf(t *SagaType) *shape {
	s := &shape{nodes: []dnode{{Name: string(saga.Initial), Initial: true, W: initialSize, H: initialSize}}}
	index := map[string]int{string(saga.Initial): 0}
	for _, st := range t.States {
		index[st.Name] = len(s.nodes)
		s.nodes = append(s.nodes, dnode{Name: st.Name, Final: st.Final, W: nodeWidth(st.Name), H: nodeH})
	}
	type pair struct{ from, to string }
	merged := map[pair]int{}
	for _, e := range t.Edges {
		p := pair{string(e.From), string(e.To)}
		if _, ok := index[p.from]; !ok {
			continue
		}
		if _, ok := index[p.to]; !ok {
			continue
		}
		i, ok := merged[p]
		if !ok {
			i = len(s.edges)
			merged[p] = i
			s.edges = append(s.edges, dedge{From: p.from, To: p.to})
		}
		ed := &s.edges[i]
		ed.Lines = append(ed.Lines, dline{Text: shorten(e.Label, labelRunes)})
		if ed.Title != "" {
			ed.Title += ", "
		}
		ed.Title += e.Label
	}
	return s
}

// dot writes s in the DOT language. No user string enters it: nodes are
// n<index>, and each label is a placeholder of as many x as its line has
// runes, so that dot reserves its size.
func (s *shape) dot() []byte {
	var b bytes.Buffer
	b.WriteString("digraph m {\ngraph [rankdir=LR, nodesep=0.3, ranksep=0.5, pad=0];\n")
	b.WriteString("node [shape=box, style=rounded, fixedsize=true, label=\"\"];\n")
	b.WriteString("edge [fontname=Courier, fontsize=11, arrowsize=0.7];\n")
	for i, n := range s.nodes {
		sh := ""
		if n.Initial {
			sh = ", shape=circle"
		}
		fmt.Fprintf(&b, "n%d [width=%.4f, height=%.4f%s];\n", i, n.W/pointsPerIn, n.H/pointsPerIn, sh)
	}
	index := map[string]int{}
	for i, n := range s.nodes {
		index[n.Name] = i
	}
	for i, e := range s.edges {
		lines := make([]string, len(e.Lines))
		for j, l := range e.Lines {
			lines[j] = strings.Repeat("x", utf8.RuneCountInString(l.Text))
		}
		fmt.Fprintf(&b, "n%d -> n%d [id=e%d, label=\"%s\"];\n", index[e.From], index[e.To], i, strings.Join(lines, `\n`))
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// dotJSON is the part of dot's json0 output that the diagram reads.
type dotJSON struct {
	BB      string `json:"bb"`
	Objects []struct {
		Name string `json:"name"`
		Pos  string `json:"pos"`
	} `json:"objects"`
	Edges []struct {
		ID  string `json:"id"`
		Pos string `json:"pos"`
		LP  string `json:"lp"`
	} `json:"edges"`
}

// runDot lays t out with dot. The caller holds layouts.mu.
func runDot(ctx context.Context, t *SagaType) (*diagram, error) {
	if layouts.gv == nil {
		gv, err := graphviz.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("start graphviz: %w", err)
		}
		layouts.gv = gv
	}
	s := shapeOf(t)
	g, err := graphviz.ParseBytes(s.dot())
	if err != nil {
		return nil, fmt.Errorf("parse dot: %w", err)
	}
	defer func() { _ = g.Close() }()
	var out bytes.Buffer
	if err := layouts.gv.Render(ctx, g, graphviz.Format("json0"), &out); err != nil {
		return nil, fmt.Errorf("run dot: %w", err)
	}
	var res dotJSON
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("read dot's layout: %w", err)
	}
	return s.place(&res)
}

// place turns dot's coordinates (points, y upwards, inside bb) into the
// diagram's (y downwards, with a margin).
func (s *shape) place(res *dotJSON) (*diagram, error) {
	bb, err := floats(res.BB, 4)
	if err != nil {
		return nil, fmt.Errorf("bb %q: %w", res.BB, err)
	}
	conv := func(p point) point { return point{round1(p.X - bb[0] + margin), round1(bb[3] - p.Y + margin)} }
	d := &diagram{Width: bb[2] - bb[0] + 2*margin, Height: bb[3] - bb[1] + 2*margin, Nodes: s.nodes, Edges: s.edges}
	if len(res.Objects) != len(d.Nodes) || len(res.Edges) != len(d.Edges) {
		return nil, fmt.Errorf("dot returned %d nodes and %d edges, want %d and %d", len(res.Objects), len(res.Edges), len(d.Nodes), len(d.Edges))
	}
	for _, o := range res.Objects {
		i, err := strconv.Atoi(strings.TrimPrefix(o.Name, "n"))
		if err != nil || i < 0 || i >= len(d.Nodes) {
			return nil, fmt.Errorf("unknown node %q", o.Name)
		}
		c, err := parsePoint(o.Pos)
		if err != nil {
			return nil, fmt.Errorf("node %q: %w", o.Name, err)
		}
		n := &d.Nodes[i]
		c = conv(c)
		n.CX, n.CY, n.X, n.Y = c.X, c.Y, c.X-n.W/2, c.Y-n.H/2
		n.NameY, n.CountY = n.CY-3, n.CY+13
		n.Inner = dbox{n.X + 3, n.Y + 3, n.W - 6, n.H - 6}
	}
	for _, e := range res.Edges {
		i, err := strconv.Atoi(strings.TrimPrefix(e.ID, "e"))
		if err != nil || i < 0 || i >= len(d.Edges) {
			return nil, fmt.Errorf("unknown edge %q", e.ID)
		}
		if err := d.Edges[i].route(e.Pos, e.LP, conv); err != nil {
			return nil, fmt.Errorf("edge %q: %w", e.ID, err)
		}
	}
	for i := range d.Edges {
		d.snap(i)
	}
	return d, nil
}

// labelGap is how close a label is moved to its edge: dot keeps an edge's
// label beside the edge's course, sometimes a line's height away.
const labelGap = 3

// snap moves edge i's label towards the nearest point of its curve until
// it is labelGap away, unless that would cover another label or a state.
func (d *diagram) snap(i int) {
	e := &d.Edges[i]
	near, gap := nearest(e.Label, curve(e.Points))
	if gap <= labelGap {
		return
	}
	cx, cy := e.Label.X+e.Label.W/2, e.Label.Y+e.Label.H/2
	step := (gap - labelGap) / math.Hypot(near.X-cx, near.Y-cy) // of the way from the centre to near
	moved := e.Label
	moved.X, moved.Y = round1(moved.X+(near.X-cx)*step), round1(moved.Y+(near.Y-cy)*step)
	for j, o := range d.Edges {
		if j != i && overlaps(moved, o.Label) {
			return
		}
	}
	for _, n := range d.Nodes {
		if overlaps(moved, dbox{n.X, n.Y, n.W, n.H}) {
			return
		}
	}
	dx, dy := moved.X-e.Label.X, moved.Y-e.Label.Y
	e.Label, e.LX = moved, round1(e.LX+dx)
	for j := range e.Lines {
		e.Lines[j].Y = round1(e.Lines[j].Y + dy)
	}
}

func overlaps(a, b dbox) bool {
	return a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
}

// curve samples a path of cubic Bézier segments (a start point, then three
// points per segment) and a final straight line to the arrow's tip.
func curve(pts []point) []point {
	out := []point{pts[0]}
	i := 1
	for ; i+2 < len(pts); i += 3 {
		p0, p1, p2, p3 := pts[i-1], pts[i], pts[i+1], pts[i+2]
		for k := 1; k <= 16; k++ {
			u := float64(k) / 16
			a, b, c, d := (1-u)*(1-u)*(1-u), 3*u*(1-u)*(1-u), 3*u*u*(1-u), u*u*u
			out = append(out, point{a*p0.X + b*p1.X + c*p2.X + d*p3.X, a*p0.Y + b*p1.Y + c*p2.Y + d*p3.Y})
		}
	}
	return append(out, pts[i:]...)
}

// nearest is the point of pts nearest to b, and its distance.
func nearest(b dbox, pts []point) (point, float64) {
	best, at := math.Inf(1), point{}
	for _, p := range pts {
		dx := math.Max(math.Max(b.X-p.X, p.X-(b.X+b.W)), 0)
		dy := math.Max(math.Max(b.Y-p.Y, p.Y-(b.Y+b.H)), 0)
		if d := math.Hypot(dx, dy); d < best {
			best, at = d, p
		}
	}
	return at, best
}

// route sets e's path from dot's spline and centres its label on lp.
func (e *dedge) route(pos, lp string, conv func(point) point) error {
	if err := e.spline(pos, conv); err != nil {
		return fmt.Errorf("pos %q: %w", pos, err)
	}
	c, err := parsePoint(lp)
	if err != nil {
		return fmt.Errorf("lp %q: %w", lp, err)
	}
	c = conv(c)
	w := 0
	for _, l := range e.Lines {
		w = max(w, utf8.RuneCountInString(l.Text))
	}
	h := lineH * float64(len(e.Lines))
	e.LX = c.X
	e.Label = dbox{X: c.X - charW*float64(w)/2, Y: c.Y - h/2, W: charW * float64(w), H: h}
	for j := range e.Lines {
		e.Lines[j].Y = e.Label.Y + lineH*float64(j+1) - 3
	}
	return nil
}

// spline reads dot's edge pos ("e,x,y", the arrow's tip, then 3n+1
// control points of a cubic Bézier spline) into e.Points and e.Path.
func (e *dedge) spline(pos string, conv func(point) point) error {
	var tip *point
	e.Points = e.Points[:0]
	for _, f := range strings.Fields(strings.ReplaceAll(pos, "\\\n", "")) {
		if strings.HasPrefix(f, "s,") {
			continue // no arrow at the tail
		}
		p, err := parsePoint(strings.TrimPrefix(f, "e,"))
		if err != nil {
			return err
		}
		if p = conv(p); strings.HasPrefix(f, "e,") {
			tip = &p
		} else {
			e.Points = append(e.Points, p)
		}
	}
	if len(e.Points) < 4 || (len(e.Points)-1)%3 != 0 {
		return fmt.Errorf("%d control points", len(e.Points))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "M %.1f %.1f", e.Points[0].X, e.Points[0].Y)
	for i := 1; i < len(e.Points); i += 3 {
		fmt.Fprintf(&b, " C %.1f %.1f, %.1f %.1f, %.1f %.1f", e.Points[i].X, e.Points[i].Y, e.Points[i+1].X, e.Points[i+1].Y, e.Points[i+2].X, e.Points[i+2].Y)
	}
	if tip != nil {
		fmt.Fprintf(&b, " L %.1f %.1f", tip.X, tip.Y)
		e.Points = append(e.Points, *tip)
	}
	e.Path = b.String()
	return nil
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

func parsePoint(s string) (point, error) {
	f, err := floats(s, 2)
	if err != nil {
		return point{}, err
	}
	return point{f[0], f[1]}, nil
}

// floats reads n comma-separated numbers.
func floats(s string, n int) ([]float64, error) {
	parts := strings.Split(s, ",")
	if len(parts) != n {
		return nil, fmt.Errorf("want %d numbers", n)
	}
	out := make([]float64, n)
	for i, p := range parts {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return nil, fmt.Errorf("number %d: %w", i+1, err)
		}
		out[i] = v
	}
	return out, nil
}

// shorten truncates s to n runes with an ellipsis.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

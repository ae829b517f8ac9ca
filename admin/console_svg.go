package admin

import (
	"fmt"
	"strings"

	"github.com/idemhq/idem/saga"
)

// diagram is a machine laid out for the SVG template: states in columns by
// their distance from Initial, forward transitions as curves to the right,
// backward ones as arcs below, self-loops above their state.
type diagram struct {
	Width, Height int
	Nodes         []dnode
	Edges         []dedge
}

type dnode struct {
	X, Y, W, H     int
	CX, CY         int
	Name           string
	Count          int
	Final, Initial bool
	Problem        bool
}

type dedge struct {
	Path   string
	LX, LY int
	Label  string
	Title  string
	Back   bool
}

const (
	nodeH    = 46
	colGap   = 170
	rowGap   = 58
	marginX  = 24
	loopRoom = 34 // above every node, for self-loops
)

func nodeWidth(name string) int { return max(112, 8*len(name)+32) }

// layout places the machine t described.
func layout(t *SagaType) *diagram {
	rank := ranks(t)
	cols := map[int][]string{}
	maxRank := 0
	for _, s := range t.States {
		cols[rank[s.Name]] = append(cols[rank[s.Name]], s.Name)
		maxRank = max(maxRank, rank[s.Name])
	}
	d := &diagram{}
	pos := map[string]*dnode{}
	d.Nodes = append(d.Nodes, dnode{Initial: true, Name: string(saga.Initial), W: 18, H: 18})
	pos[string(saga.Initial)] = &d.Nodes[0]
	final, counts := map[string]bool{}, map[string]int{}
	for _, s := range t.States {
		final[s.Name], counts[s.Name] = s.Final, s.Count
	}
	tallest := 0
	for r := 1; r <= maxRank; r++ {
		tallest = max(tallest, len(cols[r]))
	}
	colH := tallest*(nodeH+rowGap) - rowGap
	x := marginX + 18 + colGap/2
	for r := 1; r <= maxRank; r++ {
		w := 0
		for _, n := range cols[r] {
			w = max(w, nodeWidth(n))
		}
		top := loopRoom + 12 + (colH-(len(cols[r])*(nodeH+rowGap)-rowGap))/2
		for i, n := range cols[r] {
			nw := nodeWidth(n)
			d.Nodes = append(d.Nodes, dnode{X: x + (w-nw)/2, Y: top + i*(nodeH+rowGap), W: nw, H: nodeH, Name: n, Count: counts[n], Final: final[n]})
		}
		x += w + colGap
	}
	for i := range d.Nodes {
		n := &d.Nodes[i]
		if n.Initial {
			n.X, n.Y = marginX, loopRoom+12+colH/2-9
		}
		n.CX, n.CY = n.X+n.W/2, n.Y+n.H/2
		pos[n.Name] = n
	}
	d.Width = x - colGap + marginX + 40
	bottom := loopRoom + 12 + colH + 16
	d.Edges, bottom = edges(t, pos, rank, bottom)
	d.Height = bottom + 12
	return d
}

// ranks is each state's distance from Initial; unreachable states go in a
// last column.
func ranks(t *SagaType) map[string]int {
	rank := map[string]int{string(saga.Initial): 0}
	queue := []string{string(saga.Initial)}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, e := range t.Edges {
			if string(e.From) == s {
				if _, ok := rank[string(e.To)]; !ok {
					rank[string(e.To)] = rank[s] + 1
					queue = append(queue, string(e.To))
				}
			}
		}
	}
	last := 1
	for _, r := range rank {
		last = max(last, r)
	}
	for _, s := range t.States {
		if _, ok := rank[s.Name]; !ok {
			rank[s.Name] = last + 1
		}
	}
	return rank
}

// edges merges the transitions between one pair of states into one edge
// whose label lists the events, and routes each.
func edges(t *SagaType, pos map[string]*dnode, rank map[string]int, bottom int) ([]dedge, int) {
	type pair struct{ from, to string }
	var order []pair
	labels := map[pair][]string{}
	for _, e := range t.Edges {
		p := pair{string(e.From), string(e.To)}
		if labels[p] == nil {
			order = append(order, p)
		}
		labels[p] = append(labels[p], e.Label)
	}
	var out []dedge
	depth := bottom
	for _, p := range order {
		a, b := pos[p.from], pos[p.to]
		if a == nil || b == nil {
			continue
		}
		full := strings.Join(labels[p], ", ")
		e := dedge{Label: shorten(full, 30), Title: full}
		switch {
		case p.from == p.to:
			x1, x2 := a.X+a.W/4, a.X+3*a.W/4
			e.Path = fmt.Sprintf("M %d %d C %d %d, %d %d, %d %d", x1, a.Y, x1-6, a.Y-loopRoom, x2+6, a.Y-loopRoom, x2, a.Y-2)
			e.LX, e.LY = a.CX, a.Y-loopRoom+4
		case rank[p.to] > rank[p.from]:
			x1, y1, x2, y2 := a.X+a.W, a.CY, b.X-2, b.CY
			mid := (x1 + x2) / 2
			e.Path = fmt.Sprintf("M %d %d C %d %d, %d %d, %d %d", x1, y1, mid, y1, mid, y2, x2, y2)
			e.LX, e.LY = mid, (y1+y2)/2-6
		default:
			depth += 26
			x1, x2 := a.CX, b.CX
			e.Path = fmt.Sprintf("M %d %d C %d %d, %d %d, %d %d", x1, a.Y+a.H, x1, depth, x2, depth, x2, b.Y+b.H+2)
			e.LX, e.LY, e.Back = (x1+x2)/2, depth-4, true
		}
		out = append(out, e)
	}
	return out, depth
}

// shorten truncates s to n runes with an ellipsis.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

package admin_test

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem/saga"
)

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

var dataGraph = regexp.MustCompile(`(?s)<section class="card saga-type" id="type-pingpong">.*?data-graph="([^"]*)".*?</section>`)

// TestSagasDiagramData checks what the Saga types page gives diagram.js
// (the machine as JSON in an attribute: every state with its count and
// link, every transition merged per pair of states) and the table shown
// without JavaScript, with a hostile state name escaped in both.
func TestSagasDiagramData(t *testing.T) {
	t.Parallel()
	b := setupWith(t, nil, 0, pingPongMachine())
	code, body := newBrowser(t, b).get("/sagas")
	if code != http.StatusOK {
		t.Fatalf("GET /sagas: status %d, want 200", code)
	}
	if strings.Contains(body, hostileState) {
		t.Error("the hostile state name appears unescaped in the HTML")
	}
	m := dataGraph.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no data-graph attribute in pingpong's card:\n%s", body)
	}
	var g struct {
		Nodes []struct {
			ID, Name, Href string
			Count          int
			Final, Initial bool
		}
		Edges []struct {
			From, To, Title string
			Lines           []string
		}
	}
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &g); err != nil {
		t.Fatalf("data-graph is not JSON: %v\n%s", err, m[1])
	}
	names := map[string]string{}
	var got []string
	for _, n := range g.Nodes {
		names[n.ID] = n.Name
		got = append(got, n.Name)
		want := "/instances?" + url.Values{"type": {"pingpong"}, "state": {n.Name}}.Encode()
		if !n.Initial && n.Href != want {
			t.Errorf("state %q links to %q, want %q", n.Name, n.Href, want)
		}
	}
	if want := ([]string{"Initial", "A", "B", hostileState}); !slices.Equal(got, want) {
		t.Errorf("states %q, want %q", got, want)
	}
	var pairs []string
	for _, e := range g.Edges {
		pairs = append(pairs, names[e.From]+"→"+names[e.To])
		if len(e.Lines) != 1 || e.Title != e.Lines[0] {
			t.Errorf("edge %s → %s: lines %q and title %q, want one event", names[e.From], names[e.To], e.Lines, e.Title)
		}
	}
	if want := ([]string{"Initial→A", "A→B", "A→" + hostileState, "B→B", "B→A"}); !slices.Equal(pairs, want) {
		t.Errorf("edges %q, want %q", pairs, want)
	}
	for _, row := range []string{"<td>A</td><td>pinged</td><td>B</td>", "<td>B</td><td>pinged</td><td>B</td>",
		"<td>A</td><td>ponged</td><td>&lt;script&gt;alert(&#34;state&#34;)&lt;/script&gt;</td>"} {
		if !strings.Contains(body, row) {
			t.Errorf("the transitions table lacks the row %s", row)
		}
	}
}

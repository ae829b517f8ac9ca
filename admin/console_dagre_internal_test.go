package admin

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemhq/idem/saga"
)

// TestDiagramGraphHostileNames checks that state and event names with NUL,
// invalid UTF-8, markup and quotes reach the page as valid JSON with no
// character the attribute or the HTML parser would act on, and come back
// out of it as the names (invalid bytes as U+FFFD).
func TestDiagramGraphHostileNames(t *testing.T) {
	t.Parallel()
	const hostile = "Done\x00\xff<script>alert(1)</script>\"'&"
	st := &SagaType{Name: "ping", States: []SagaTypeState{{Name: "A"}, {Name: hostile, Final: true, Count: 3}},
		Edges: []saga.GraphEdge{{From: saga.Initial, To: "A", Label: "Start"}, {From: "A", To: hostile, Label: hostile}}}
	out, err := layout("/idem", st)
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(out) || strings.ContainsAny(out, "<>&\x00") {
		t.Errorf("the JSON carries raw markup, NUL or invalid UTF-8: %q", out)
	}
	var g diagramGraph
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatalf("not JSON: %v: %q", err, out)
	}
	want := strings.ToValidUTF8(hostile, "\uFFFD")
	if n := g.Nodes[2]; n.Name != want || n.Count != 3 || !n.Final || !strings.HasPrefix(n.Href, "/idem/instances?") {
		t.Errorf("hostile state came back as %+v, want name %q, count 3, final, a link under /idem", n, want)
	}
	if e := g.Edges[1]; e.Title != want || e.From != "n1" || e.To != "n2" {
		t.Errorf("hostile edge came back as %+v", e)
	}
}

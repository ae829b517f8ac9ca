package admin_test

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
)

// wrappedMachine is an idem.Machine that is not a *saga.Machine: it
// forwards every method to the machine it wraps, as a decorator that adds
// metrics or tracing would.
type wrappedMachine struct{ idem.Machine }

// TestWrappedMachineIsDrawn: the console reads a machine's description,
// so a Machine that wraps a *saga.Machine is drawn on the Saga types page
// and in the API, and the Why panel knows what its sagas accept.
func TestWrappedMachineIsDrawn(t *testing.T) {
	t.Parallel()
	inner := pingPongMachine()
	b := setupWith(t, nil, 0, wrappedMachine{inner})

	var types []admin.SagaType
	b.getJSON(t, "/api/saga-types", &types)
	i := slices.IndexFunc(types, func(st admin.SagaType) bool { return st.Name == "pingpong" })
	if i < 0 {
		t.Fatalf("saga types %+v lack pingpong", types)
	}
	var states []string
	for _, s := range types[i].States {
		states = append(states, s.Name)
	}
	if want := []string{"A", "B", hostileState}; !slices.Equal(states, want) {
		t.Errorf("pingpong states %q, want %q", states, want)
	}
	if want := inner.Graph().Edges; !reflect.DeepEqual(types[i].Edges, want) {
		t.Errorf("pingpong transitions %+v, want %+v", types[i].Edges, want)
	}

	br := newBrowser(t, b)
	code, body := br.get("/sagas")
	if code != http.StatusOK {
		t.Fatalf("GET /sagas: status %d, want 200", code)
	}
	m := dataGraph.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no data-graph attribute in pingpong's card:\n%s", body)
	}
	var g struct{ Nodes []struct{ Name string } }
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &g); err != nil {
		t.Fatalf("data-graph is not JSON: %v\n%s", err, m[1])
	}
	var nodes []string
	for _, n := range g.Nodes {
		nodes = append(nodes, n.Name)
	}
	if want := []string{"Initial", "A", "B", hostileState}; !slices.Equal(nodes, want) {
		t.Errorf("diagram nodes %q, want %q", nodes, want)
	}

	env, err := idem.NewEnvelope("start-p-1", pingStarted{ID: "p-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.e.PublishAndWait(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	why := whyPanel(t, br, "/instances/pingpong/p-1")
	if strings.Contains(why, "not registered") || !strings.Contains(why, "pinged") {
		t.Errorf("Why panel of a wrapped machine's saga: want the events state A accepts:\n%s", why)
	}
}

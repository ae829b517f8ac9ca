package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/deploycheck"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
	"github.com/idemhq/idem/store/sqlitestore"
)

// seedOrders runs the demo's order saga (as idem serve does: the machine
// and a stand-in for orders.ShipOrder) on a new SQLite store: five orders
// placed, two of them paid and shipped, so that three live sagas wait in
// AwaitingPayment with their overdue timers. The engine is stopped and
// nothing is left queued. It returns the store's URL and path.
func seedOrders(t *testing.T) (string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.db")
	st, err := sqlitestore.Open(t.Context(), path, &sqlitestore.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e, err := idem.NewEngine(st, st, &idem.Config{Logger: slog.New(slog.DiscardHandler), TimerInterval: 20 * time.Millisecond, RelayInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(orders.OrderMachine()); err != nil {
		t.Fatal(err)
	}
	if err := e.Handle(saga.MessageType(orders.ShipOrder{}), func(context.Context, idem.Envelope) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	var envs []idem.Envelope
	add := func(id string, msg any) {
		env, err := e.NewEnvelope(id, msg)
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
	}
	for i := range 5 {
		add(fmt.Sprintf("placed-%d", i), orders.OrderPlaced{OrderID: fmt.Sprintf("o-%d", i), Items: i + 1})
	}
	if err := e.Publish(t.Context(), envs...); err != nil {
		t.Fatal(err)
	}
	waitCensus(t, st, map[string]int64{"AwaitingPayment": 5})
	envs = nil
	add("paid-0", orders.PaymentReceived{OrderID: "o-0", Amount: 10})
	add("paid-1", orders.PaymentReceived{OrderID: "o-1", Amount: 20})
	if err := e.Publish(t.Context(), envs...); err != nil {
		t.Fatal(err)
	}
	waitCensus(t, st, map[string]int64{"AwaitingPayment": 3})
	if err := e.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	return "sqlite://" + path, path
}

// waitCensus waits until the live sagas are in want's states and no
// message is queued or in the outbox.
func waitCensus(t *testing.T, st readmodel.Censuser, want map[string]int64) {
	t.Helper()
	enginetest.WaitFor(t, 30*time.Second, fmt.Sprintf("live sagas in %v and no message waiting", want), func() (bool, error) {
		c, err := st.Census(t.Context())
		if err != nil {
			return false, err
		}
		got := map[string]int64{}
		for _, s := range c.States {
			got[s.State] += s.Count
		}
		return fmt.Sprint(got) == fmt.Sprint(want) && len(c.Messages) == 0, nil
	})
}

// writeDefinitions writes v as JSON to a new file and returns its path.
func writeDefinitions(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "defs.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// withoutState is d without state s: its declaration, its transitions and
// the events' behaviours in it.
func withoutState(d saga.Description, s saga.State) saga.Description {
	d.States = slices.DeleteFunc(slices.Clone(d.States), func(x saga.StateDescription) bool { return x.Name == s })
	d.Transitions = slices.DeleteFunc(slices.Clone(d.Transitions), func(x saga.Transition) bool { return x.From == s || x.To == s })
	events := make([]saga.EventDescription, len(d.Events))
	for i, e := range d.Events {
		e.HandledIn = slices.DeleteFunc(slices.Clone(e.HandledIn), func(x saga.State) bool { return x == s })
		e.IgnoredIn = slices.DeleteFunc(slices.Clone(e.IgnoredIn), func(x saga.State) bool { return x == s })
		events[i] = e
	}
	d.Events = events
	return d
}

// idem deploy check on the demo's order sagas: this binary's machines are
// safe to deploy (exit 0), as is the JSON idem graph prints; a build
// without AwaitingPayment, where three live sagas wait, is not (exit 3,
// state-removed with count 3); --json is the deploycheck.Report.
func TestDeployCheck(t *testing.T) {
	t.Parallel()
	url, _ := seedOrders(t)

	code, out, errOut := run(t, "deploy", "check", "--store", url)
	if code != 0 || !strings.Contains(out, "safe to deploy: 0 hazard(s)") || !strings.Contains(out, "3 live saga(s) of 1 type(s)") {
		t.Fatalf("deploy check with this binary's machines: exit %d\nstdout: %s\nstderr: %s\nwant exit 0, safe to deploy, 3 live sagas", code, out, errOut)
	}
	t.Logf("idem deploy check --store %s\n%s", url, out)
	var r deploycheck.Report
	code, out, errOut = run(t, "deploy", "check", "--json", "--store", url)
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || !r.OK() || r.Live["order"] != 3 {
		t.Fatalf("deploy check --json: exit %d, %v, report %+v\nstderr: %s\nwant exit 0 and a Report with 3 live order sagas", code, err, r, errOut)
	}

	_, graph, _ := run(t, "graph", "--format", "json")
	defs := filepath.Join(t.TempDir(), "graph.json")
	if err := os.WriteFile(defs, []byte(graph), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run(t, "deploy", "check", "--definitions", defs, "--store", url); code != 0 || !strings.Contains(out, "safe to deploy") {
		t.Errorf("deploy check --definitions (idem graph --format json): exit %d\nstdout: %s\nstderr: %s\nwant exit 0", code, out, errOut)
	}

	broken := withoutState(orders.OrderMachine().Describe(), "AwaitingPayment")
	defs = writeDefinitions(t, describedMachine{Fingerprint: broken.Fingerprint(), Description: broken})
	code, out, errOut = run(t, "deploy", "check", "--definitions", defs, "--store", url)
	if code != exitHazard || !strings.Contains(out, "NOT safe to deploy: 1 hazard(s)") || !hasRow(out, "hazard", "state-removed", "order", "AwaitingPayment", "-", "3") {
		t.Errorf("deploy check without AwaitingPayment: exit %d\nstdout: %s\nstderr: %s\nwant exit %d and a state-removed row for 3 sagas in AwaitingPayment", code, out, errOut, exitHazard)
	}
	if !strings.Contains(out, `  3 live saga(s) in state "AwaitingPayment", which`) {
		t.Errorf("the detail cell is quoted as a whole though it is printable:\n%s", out)
	}
	t.Logf("idem deploy check --definitions defs.json --store %s\n%s", url, out)
	code, out, _ = run(t, "deploy", "check", "--json", "--definitions", defs, "--store", url)
	r = deploycheck.Report{}
	if err := json.Unmarshal([]byte(out), &r); code != exitHazard || err != nil || len(r.Hazards) != 1 {
		t.Fatalf("deploy check --json without AwaitingPayment: exit %d, %v, report %+v; want exit %d and one hazard", code, err, r, exitHazard)
	}
	if h := r.Hazards[0]; h.Kind != deploycheck.StateRemoved || h.SagaType != "order" || h.State != "AwaitingPayment" || h.Count != 3 {
		t.Errorf("hazard %+v; want state-removed of order in AwaitingPayment, count 3", h)
	}
}

// hasRow reports whether the table in out has a row of these cells.
func hasRow(out string, cells ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= len(cells) && slices.Equal(f[:len(cells)], cells) {
			return true
		}
	}
	return false
}

// --definitions - reads stdin, and json.Marshal(m.Describe()) (no
// fingerprint) is accepted as it is.
func TestDeployCheckDefinitionsFromStdin(t *testing.T) {
	t.Parallel()
	url, _ := seedOrders(t)
	d, err := json.Marshal(orders.OrderMachine().Describe())
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	root := newRoot(&out, &errb)
	root.SetIn(bytes.NewReader(d))
	root.SetArgs([]string{"deploy", "check", "--definitions", "-", "--handled", saga.MessageType(orders.ShipOrder{}), "--store", url})
	if err := root.ExecuteContext(t.Context()); err != nil || !strings.Contains(out.String(), "safe to deploy") {
		t.Errorf("deploy check --definitions - with json.Marshal(m.Describe()) on stdin: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
	}
}

// Bad --definitions input stops with exit 2 and a message saying what is
// wrong, before the store is opened.
func TestDeployCheckBadDefinitions(t *testing.T) {
	t.Parallel()
	url, _ := seedOrders(t)
	d := orders.OrderMachine().Describe()
	file := func(content string) string {
		path := filepath.Join(t.TempDir(), "defs.json")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	edited := d
	edited.States = d.States[:1]
	for _, c := range []struct {
		name, defs, want string
	}{
		{"a missing file", filepath.Join(t.TempDir(), "nope.json"), "no such file"},
		{"a hostile file name", "nope\x1b[2J.json", `--definitions "nope\x1b[2J.json": no such file`},
		{"an empty file", file(" \n"), "is empty"},
		{"not JSON", file("states: [x]"), "is not a JSON object or array"},
		{"broken JSON", file(`{"name": "order", "states": [`), "is not the JSON that idem graph --format json prints"},
		{"two values", file(`{"name": "a"} {"name": "b"}`), "more than one JSON value"},
		{"an empty array", file(`[]`), "empty array"},
		{"no name", file(`[{"states": []}]`), `description 1 has no "name"`},
		{"a saga type twice", writeDefinitions(t, []saga.Description{d, d}), `saga type "order" twice`},
		{"a fingerprint that is not its description's", writeDefinitions(t, describedMachine{Fingerprint: d.Fingerprint(), Description: edited}),
			`the fingerprint of saga type "order" is`},
		{"a hostile saga type's fingerprint", writeDefinitions(t, describedMachine{Fingerprint: "v1:0", Description: saga.Description{Name: "x\x00<script>"}}),
			`saga type "x\x00<script>"`},
	} {
		code, out, errOut := run(t, "deploy", "check", "--definitions", c.defs, "--store", url)
		if code != 2 || !strings.Contains(errOut, "--definitions") || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("%s: exit %d\nstdout: %s\nstderr: %s\nwant exit 2 and %q", c.name, code, out, errOut, c.want)
		}
	}
	code, _, errOut := run(t, "deploy", "check", "--definitions", file(string(mustJSON(t, d))), "--sample", "10", "--store", url)
	if code != 2 || !strings.Contains(errOut, "--sample runs the new build's upgrade functions") {
		t.Errorf("--sample with --definitions: exit %d, stderr %q; want exit 2 saying why", code, errOut)
	}
	if code, _, errOut := run(t, "deploy", "check", "--sample", "-1", "--store", url); code != 2 || !strings.Contains(errOut, "--sample is -1") {
		t.Errorf("--sample -1: exit %d, stderr %q; want exit 2", code, errOut)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// --sample decodes the live order sagas' state documents with this
// binary's machine: the seeded ones decode; one whose document does not
// is a state-undecodable hazard naming its key, quoted, and the command
// exits 3.
func TestDeployCheckSample(t *testing.T) {
	t.Parallel()
	url, path := seedOrders(t)
	code, out, errOut := run(t, "deploy", "check", "--sample", "100", "--store", url)
	if code != 0 || !strings.Contains(out, "sampled 3 live state document(s) of order: 0 did not decode") {
		t.Fatalf("deploy check --sample 100: exit %d\nstdout: %s\nstderr: %s\nwant exit 0 and 3 documents decoded", code, out, errOut)
	}
	st, err := sqlitestore.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	bad := &store.Instance{SagaType: "order", Key: "bad\x00<script>", State: "AwaitingPayment", Data: []byte(`{"Items":"two"}`), SchemaVersion: 1, Version: 1, CreatedAt: now, UpdatedAt: now}
	uow, err := st.Begin(t.Context())
	if err == nil {
		err = uow.Commit(t.Context(), &store.Changes{Inserts: []*store.Instance{bad}})
	}
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(t, "deploy", "check", "--sample", "100", "--store", url)
	if code != exitHazard || !hasRow(out, "hazard", "state-undecodable", "order", "-", "-", "1") || !strings.Contains(out, `key "bad\x00<script>"`) ||
		strings.Contains(out, "\x00") || !strings.Contains(out, "sampled 4 live state document(s) of order: 1 did not decode") {
		t.Errorf("deploy check --sample 100 with an undecodable document: exit %d\nstdout: %s\nstderr: %s\nwant exit %d, a state-undecodable row for 1 naming the key quoted", code, out, errOut, exitHazard)
	}
	t.Logf("idem deploy check --sample 100 --store %s\n%s", url, out)
	var r deploycheck.Report
	_, out, _ = run(t, "deploy", "check", "--sample", "2", "--json", "--store", url)
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Samples) != 1 || r.Samples[0].Read != 2 {
		t.Errorf("deploy check --sample 2 --json: %v, samples %+v; want 2 documents read", err, r.Samples)
	}
}

package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/deploycheck"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

// oldReplica is the ID of the replica of definition A that seedDeploy
// reports alive.
const oldReplica = "replica-of-definition-a"

// seedDeploy writes what a build of the order saga before this one left:
// definition A (the order machine with a state Packing more) recorded,
// an alive replica that runs it, and packing live sagas in state Packing
// beside two in AwaitingPayment. It returns A's fingerprint.
func seedDeploy(t *testing.T, b *bundle, packing int) string {
	t.Helper()
	ctx := context.Background()
	a := orders.OrderMachine().Describe()
	a.States = append(a.States, saga.StateDescription{Name: "Packing", Ignores: []string{}})
	fp := a.Fingerprint()
	desc, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	ds, ok := any(b.st).(store.DefinitionStore)
	if !ok {
		t.Fatalf("store %T keeps no definitions", b.st)
	}
	now := time.Now()
	if err := ds.RecordDefinitions(ctx, now.Add(-time.Hour), []store.Definition{{SagaType: "order", Fingerprint: fp, Description: desc}}); err != nil {
		t.Fatal(err)
	}
	if err := b.st.Heartbeat(ctx, &store.Replica{ID: oldReplica, Host: "old-host", StartedAt: now.Add(-time.Hour), BeatAt: now,
		Interval: time.Hour, Definitions: map[string]string{"order": fp}}); err != nil {
		t.Fatal(err)
	}
	var ins []*store.Instance
	for i := range packing + 2 {
		state := "Packing"
		if i >= packing {
			state = "AwaitingPayment"
		}
		ins = append(ins, &store.Instance{SagaType: "order", Key: "o-" + string(rune('a'+i)), State: state, Data: []byte(`{}`), SchemaVersion: 1,
			Version: 1, CreatedAt: now, UpdatedAt: now})
	}
	commitChanges(t, b.st, &store.Changes{Inserts: ins})
	return fp
}

// deployType returns the saga type typ of d, failing without it.
func deployType(t *testing.T, d *admin.Deploys, typ string) admin.DeploySagaType {
	t.Helper()
	for _, x := range d.SagaTypes {
		if x.SagaType == typ {
			return x
		}
	}
	t.Fatalf("no saga type %q in %+v", typ, d.SagaTypes)
	return admin.DeploySagaType{}
}

// deployState returns state s of x, failing without it.
func deployState(t *testing.T, x admin.DeploySagaType, s string) admin.DeployState {
	t.Helper()
	for _, st := range x.States {
		if st.State == s {
			return st
		}
	}
	t.Fatalf("no state %q of %s in %+v", s, x.SagaType, x.States)
	return admin.DeployState{}
}

// Live sagas in a state the registered machine lacks: the check reports
// state-removed with their count, on their state's row and no other; the
// replica of the definition that has the state is a notice, alive; both
// definitions are listed with their replicas.
func TestAPIDeploysStateRemoved(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	fpA := seedDeploy(t, b, 3)
	fpB := orders.OrderMachine().Describe().Fingerprint()
	var d admin.Deploys
	eventually(t, "the console's replica running definition B", func() bool {
		d = admin.Deploys{}
		b.getJSON(t, "/api/deploys", &d)
		x := deployType(t, &d, "order")
		return len(x.Definitions) == 2 && len(x.Definitions[1].Replicas) == 1
	})
	if d.Check == nil || d.Census == nil || !d.Registry || !slices.Equal(d.Machines, []string{"order"}) {
		t.Fatalf("deploys: check %v, census %v, registry %v, machines %v; want a check, a census, a registry and [order]", d.Check, d.Census, d.Registry, d.Machines)
	}
	want := deploycheck.Hazard{Kind: deploycheck.StateRemoved, SagaType: "order", State: "Packing", Count: 3}
	if got := hazardsOf(d.Check.Hazards); !slices.Equal(got, []deploycheck.Hazard{want}) {
		t.Errorf("check hazards: %+v, want only %+v", got, want)
	}
	x := deployType(t, &d, "order")
	if x.Live != 5 || x.Fingerprint != fpB {
		t.Errorf("order: live %d, fingerprint %s; want 5 and %s", x.Live, x.Fingerprint, fpB)
	}
	if p := deployState(t, x, "Packing"); p.Live != 3 || !slices.Equal(hazardsOf(p.Hazards), []deploycheck.Hazard{want}) {
		t.Errorf("state Packing: live %d, hazards %+v; want 3 and %+v", p.Live, hazardsOf(p.Hazards), want)
	}
	if a := deployState(t, x, "AwaitingPayment"); a.Live != 2 || len(a.Hazards) != 0 || len(a.Versions) != 1 || a.Versions[0] != (admin.DeployVersion{SchemaVersion: 1, Live: 2}) {
		t.Errorf("state AwaitingPayment: %+v; want 2 live at version 1 and no hazard", a)
	}
	if len(x.Hazards) != 0 || len(x.Notices) != 1 || x.Notices[0].Kind != deploycheck.MixedFleet || x.Notices[0].Count != 1 {
		t.Errorf("order's own hazards %+v and notices %+v; want none and one mixed-fleet notice of 1 replica", x.Hazards, x.Notices)
	}
	defA, defB := x.Definitions[0], x.Definitions[1]
	if defA.Fingerprint != fpA || defA.Current || !defA.Recorded || defA.FirstSeen.IsZero() ||
		!slices.Equal(defA.Replicas, []admin.DeployReplica{{ID: oldReplica, State: store.ReplicaAlive}}) {
		t.Errorf("first definition: %+v; want A (%s), recorded, not current, run by %s alive", defA, fpA, oldReplica)
	}
	if defB.Fingerprint != fpB || !defB.Current || !slices.Equal(defB.Replicas, []admin.DeployReplica{{ID: b.e.ReplicaID(), State: store.ReplicaAlive, Self: true}}) {
		t.Errorf("second definition: %+v; want B (%s), current, run by this console's replica", defB, fpB)
	}
}

// hazardsOf keeps a hazard's kind, place and count: what the tests
// compare.
func hazardsOf(hs []deploycheck.Hazard) []deploycheck.Hazard {
	out := []deploycheck.Hazard{}
	for _, h := range hs {
		out = append(out, deploycheck.Hazard{Kind: h.Kind, SagaType: h.SagaType, State: h.State, Event: h.Event, Count: h.Count})
	}
	return out
}

// The Deploys page shows the same: the hazard on its state's row, the
// verdict, and when the store was read; it does not refresh itself.
func TestConsoleDeploysPage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seedDeploy(t, b, 3)
	code, page := b.do(t, http.MethodGet, "/deploys", "")
	if code != http.StatusOK {
		t.Fatalf("GET /deploys: %d %s", code, page)
	}
	for _, want := range []string{`data-state="Packing" class="hazard" data-hazards="1"`, `data-kind="state-removed"`, "state-removed <b>3</b>",
		"Not safe to deploy: 1 hazard(s), 1 notice(s).", `id="deploys-read"`, `href="/deploys" aria-current="page"`, oldReplica} {
		if !strings.Contains(page, want) {
			t.Errorf("the Deploys page lacks %q", want)
		}
	}
	if strings.Contains(page, "data-live=") {
		t.Error("the Deploys page refreshes itself (data-live): the census it reads counts every live saga")
	}
}

package saga_test

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem/saga"
)

// The shipment fixture: every kind of declaration a description holds.
type (
	shipState     struct{ ID, Carrier string }
	shipOrdered   struct{ ID string }
	shipPacked    struct{ ID string }
	shipDelivered struct{ ID string }
	shipCancelled struct{ ID string }
	shipReminder  struct{ ID string }
	shipRate      struct{ ID string }
	shipRated     struct{ ID string }
	shipLabel     struct{ ID string }
)

// shipOpts are the changes a test makes to the shipment fixture.
type shipOpts struct {
	reverse          bool   // declare everything in reverse order
	extraState       bool   // declare one more state, "Lost"
	returnedNotFinal bool   // Returned is not final
	retarget         bool   // shipPacked leads from Ordered to Delivered, not Packed
	ignoreCancel     bool   // Delivered ignores shipCancelled
	requestName      string // "" is "rate"
	dropAttribute    bool   // no "carrier" attribute
	addUpgrade       bool   // an upgrade from 1 (the version stays 4)
	bumpVersion      bool   // an upgrade from 4 (version 5)
	unhandledIgnore  bool
	notFoundDead     bool
}

func ordered[T any](reverse bool, xs ...T) []T {
	if reverse {
		xs = slices.Clone(xs)
		slices.Reverse(xs)
	}
	return xs
}

func run(reverse bool, fns ...func()) {
	for _, fn := range ordered(reverse, fns...) {
		fn()
	}
}

func shipMachine(o shipOpts) *saga.Machine[shipState] {
	m := saga.New[shipState]("shipment")
	st := map[string]saga.State{}
	run(o.reverse,
		func() { st["Ordered"] = m.State("Ordered") },
		func() { st["Packed"] = m.State("Packed") },
		func() { st["Delivered"] = m.Final("Delivered") },
		func() {
			if o.returnedNotFinal {
				st["Returned"] = m.State("Returned")
			} else {
				st["Returned"] = m.Final("Returned")
			}
		},
		func() {
			if o.extraState {
				m.State("Lost")
			}
		},
	)
	key := func(id string) string { return id }
	var (
		orderedEv   *saga.Event[shipState, shipOrdered]
		packedEv    *saga.Event[shipState, shipPacked]
		deliveredEv *saga.Event[shipState, shipDelivered]
		cancelledEv *saga.Event[shipState, shipCancelled]
		reminderEv  *saga.Event[shipState, shipReminder]
		labelFault  *saga.Event[shipState, saga.Fault[shipLabel]]
		rate        *saga.Request[shipState, shipRate, shipRated]
	)
	name := o.requestName
	if name == "" {
		name = "rate"
	}
	run(o.reverse,
		func() { orderedEv = saga.NewEvent[shipOrdered](m, func(e shipOrdered) string { return key(e.ID) }) },
		func() { packedEv = saga.NewEvent[shipPacked](m, func(e shipPacked) string { return key(e.ID) }) },
		func() {
			deliveredEv = saga.NewEvent[shipDelivered](m, func(e shipDelivered) string { return key(e.ID) })
		},
		func() {
			cancelledEv = saga.NewEvent[shipCancelled](m, func(e shipCancelled) string { return key(e.ID) })
		},
		func() { reminderEv = saga.NewEvent[shipReminder](m, func(e shipReminder) string { return key(e.ID) }) },
		func() { labelFault = saga.NewFault[shipLabel](m) },
		func() {
			rate = saga.NewRequest[shipRate, shipRated](m, name, func(e shipRated) string { return key(e.ID) })
		},
	)
	packedTo := st["Packed"]
	if o.retarget {
		packedTo = st["Delivered"]
	}
	m.Initially(saga.When(orderedEv).TransitionTo(st["Ordered"]))
	m.During(st["Ordered"], ordered[saga.Behavior[shipState]](o.reverse,
		saga.When(packedEv).TransitionTo(packedTo),
		saga.When(reminderEv),
		saga.Ignore(orderedEv),
		saga.When(rate.Completed),
		saga.When(rate.TimeoutExpired),
		saga.Ignore(rate.Faulted),
		saga.When(labelFault).TransitionTo(st["Returned"]),
	)...)
	m.During(st["Packed"], ordered[saga.Behavior[shipState]](o.reverse,
		saga.When(deliveredEv).TransitionTo(st["Delivered"]),
		saga.When(cancelledEv).TransitionTo(st["Returned"]),
		saga.Ignore(reminderEv),
	)...)
	if o.ignoreCancel {
		m.During(st["Delivered"], saga.Ignore(cancelledEv))
	}
	up := func(raw json.RawMessage) (json.RawMessage, error) { return raw, nil }
	run(o.reverse,
		func() {
			if !o.dropAttribute {
				m.Attribute("carrier", func(s shipState) string { return s.Carrier })
			}
		},
		func() { m.Attribute("id", func(s shipState) string { return s.ID }) },
		func() { m.Upgrade(2, up) },
		func() { m.Upgrade(3, up) },
		func() {
			if o.addUpgrade {
				m.Upgrade(1, up)
			}
		},
		func() {
			if o.bumpVersion {
				m.Upgrade(4, up)
			}
		},
	)
	if o.unhandledIgnore {
		m.OnUnhandled(saga.UnhandledIgnore)
	}
	if o.notFoundDead {
		m.OnNotFound(saga.NotFoundDeadLetter)
	}
	return m
}

// shipFingerprint pins the fingerprint of shipMachine(shipOpts{}). It
// changes only when the canonical encoding changes, which is a deliberate
// format change: bump saga.FingerprintVersion with it, since every stored
// fingerprint of every machine changes too.
const shipFingerprint = "v1:d45e6418aa84d410ca7c0817fb756372a3e17963a53ae8320beb0e4a25d9c3b6"

func TestFingerprintGolden(t *testing.T) {
	d := shipMachine(shipOpts{}).Describe()
	if got := d.Fingerprint(); got != shipFingerprint {
		t.Errorf("Fingerprint() = %s, want %s: the canonical encoding changed; if on purpose, bump saga.FingerprintVersion", got, shipFingerprint)
	}
	got, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	const golden = "testdata/shipment.description.json"
	if os.Getenv("IDEM_UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Describe() encodes as\n%s\nwant (%s)\n%s", got, golden, want)
	}
}

func TestFingerprintSameMachineTwice(t *testing.T) {
	a, b := shipMachine(shipOpts{}).Describe(), shipMachine(shipOpts{}).Describe()
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two builds describe differently:\n%+v\n%+v", a, b)
	}
	if a.Fingerprint() != b.Fingerprint() {
		t.Errorf("two builds: fingerprints %s and %s", a.Fingerprint(), b.Fingerprint())
	}
	m := shipMachine(shipOpts{})
	if a, b := m.Describe().Fingerprint(), m.Describe().Fingerprint(); a != b {
		t.Errorf("one machine described twice: fingerprints %s and %s", a, b)
	}
}

func TestFingerprintIgnoresDeclarationOrder(t *testing.T) {
	a, b := shipMachine(shipOpts{}).Describe(), shipMachine(shipOpts{reverse: true}).Describe()
	if reflect.DeepEqual(a.States, b.States) || reflect.DeepEqual(a.Events, b.Events) || reflect.DeepEqual(a.Attributes, b.Attributes) {
		t.Fatalf("the reversed build lists states, events and attributes in the same order: the test proves nothing")
	}
	if a.Fingerprint() != b.Fingerprint() {
		t.Errorf("reversed declarations: fingerprint %s, want %s", b.Fingerprint(), a.Fingerprint())
	}
	if !reflect.DeepEqual(a.Canonical(), b.Canonical()) {
		t.Errorf("reversed declarations: canonical forms differ:\n%+v\n%+v", a.Canonical(), b.Canonical())
	}
}

func TestFingerprintChangesWithTheDefinition(t *testing.T) {
	base := shipMachine(shipOpts{}).Describe().Fingerprint()
	tests := []struct {
		name string
		opts shipOpts
	}{
		{"a state added", shipOpts{extraState: true}},
		{"a final flag", shipOpts{returnedNotFinal: true}},
		{"a transition retargeted", shipOpts{retarget: true}},
		{"an event ignored", shipOpts{ignoreCancel: true}},
		{"a timer renamed", shipOpts{requestName: "quote"}},
		{"an attribute removed", shipOpts{dropAttribute: true}},
		{"an upgrade added", shipOpts{addUpgrade: true}},
		{"schema version bumped", shipOpts{bumpVersion: true}},
		{"unhandled policy", shipOpts{unhandledIgnore: true}},
		{"not-found policy", shipOpts{notFoundDead: true}},
	}
	seen := map[string]string{base: "the base machine"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := shipMachine(tt.opts).Describe().Fingerprint()
			if other, dup := seen[got]; dup {
				t.Errorf("fingerprint %s, the same as %s's", got, other)
			}
			seen[got] = tt.name
		})
	}
}

// TestFingerprintCoversEveryField changes each field of a description, one
// at a time: a field the canonical encoding left out would not change the
// fingerprint.
func TestFingerprintCoversEveryField(t *testing.T) {
	base := shipMachine(shipOpts{}).Describe()
	edits := map[string]func(d *saga.Description){
		"name":                 func(d *saga.Description) { d.Name = "parcel" },
		"data_type":            func(d *saga.Description) { d.DataType = "other.State" },
		"schema_version":       func(d *saga.Description) { d.SchemaVersion++ },
		"upgrades":             func(d *saga.Description) { d.Upgrades = d.Upgrades[1:] },
		"states.name":          func(d *saga.Description) { d.States[0].Name = "Placed" },
		"states.final":         func(d *saga.Description) { d.States[0].Final = true },
		"states.ignores":       func(d *saga.Description) { d.States[0].Ignores = nil },
		"events.type":          func(d *saga.Description) { d.Events[0].Type = "x.Other" },
		"events.go_type":       func(d *saga.Description) { d.Events[0].GoType = "x.Other" },
		"events.handled_in":    func(d *saga.Description) { d.Events[0].HandledIn = nil },
		"events.ignored_in":    func(d *saga.Description) { d.Events[0].IgnoredIn = nil },
		"transitions.to":       func(d *saga.Description) { d.Transitions[0].To = "Packed" },
		"transitions.removed":  func(d *saga.Description) { d.Transitions = d.Transitions[1:] },
		"unhandled":            func(d *saga.Description) { d.Unhandled = "ignore" },
		"not_found":            func(d *saga.Description) { d.NotFound = "dead_letter" },
		"requests.timer":       func(d *saga.Description) { d.Requests[0].Timer = "idem.request/other" },
		"requests.command":     func(d *saga.Description) { d.Requests[0].Command = "x.Other" },
		"requests.response":    func(d *saga.Description) { d.Requests[0].Response = "x.Other" },
		"requests.timeout":     func(d *saga.Description) { d.Requests[0].Timeout = "x.Other" },
		"requests.fault":       func(d *saga.Description) { d.Requests[0].Fault = "x.Other" },
		"requests.name":        func(d *saga.Description) { d.Requests[0].Name = "other" },
		"faults.message_type":  func(d *saga.Description) { d.Faults[0].MessageType = "x.Other" },
		"faults.event":         func(d *saga.Description) { d.Faults[0].Event = "x.Other" },
		"attributes":           func(d *saga.Description) { d.Attributes = d.Attributes[1:] },
		"attributes.renamed":   func(d *saga.Description) { d.Attributes[0] = "courier" },
		"transitions.from":     func(d *saga.Description) { d.Transitions[1].From = "Packed" },
		"transitions.event":    func(d *saga.Description) { d.Transitions[1].Event = "x.Other" },
		"states.ignores.added": func(d *saga.Description) { d.States[2].Ignores = []string{"x.Other"} },
	}
	for name, edit := range edits {
		t.Run(name, func(t *testing.T) {
			d := shipMachine(shipOpts{}).Describe()
			edit(&d)
			if d.Fingerprint() == base.Fingerprint() {
				t.Errorf("changing %s kept the fingerprint %s", name, base.Fingerprint())
			}
		})
	}
}

func TestDescriptionRoundTripsThroughJSON(t *testing.T) {
	d := shipMachine(shipOpts{}).Describe()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back saga.Description
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, d) {
		t.Errorf("decoded description differs:\ngot  %+v\nwant %+v", back, d)
	}
	if back.Fingerprint() != d.Fingerprint() {
		t.Errorf("decoded fingerprint %s, want %s", back.Fingerprint(), d.Fingerprint())
	}
	// A description written with null lists (by another encoder) is the
	// same definition.
	var nulls saga.Description
	if err := json.Unmarshal([]byte(strings.ReplaceAll(string(b), `"ignores":[]`, `"ignores":null`)), &nulls); err != nil {
		t.Fatal(err)
	}
	if nulls.Fingerprint() != d.Fingerprint() {
		t.Errorf("null lists: fingerprint %s, want %s", nulls.Fingerprint(), d.Fingerprint())
	}
}

func TestDescribeContents(t *testing.T) {
	d := shipMachine(shipOpts{}).Describe()
	if d.Name != "shipment" || d.SchemaVersion != 4 || !slices.Equal(d.Upgrades, []int{2, 3}) {
		t.Errorf("name, version, upgrades = %q, %d, %v, want shipment, 4, [2 3]", d.Name, d.SchemaVersion, d.Upgrades)
	}
	if want := "github.com/idemhq/idem/saga_test.shipState"; d.DataType != want {
		t.Errorf("DataType = %q, want %q", d.DataType, want)
	}
	if d.Unhandled != "error" || d.NotFound != "ignore" {
		t.Errorf("policies = %q, %q, want error, ignore", d.Unhandled, d.NotFound)
	}
	if len(d.Requests) != 1 {
		t.Fatalf("Requests = %+v, want one", d.Requests)
	}
	r := d.Requests[0]
	if r.Name != "rate" || r.Timer != saga.RequestTimerPrefix+"rate" || r.Timeout != "idem.Timeout[rate]@shipment" ||
		r.Command != "saga_test.shipRate" || r.Response != "saga_test.shipRated" || r.Fault != saga.FaultType("shipment", "saga_test.shipRate") {
		t.Errorf("request = %+v", r)
	}
	wantFaults := []saga.FaultDescription{
		{MessageType: "saga_test.shipLabel", Event: saga.FaultType("shipment", "saga_test.shipLabel")},
		{MessageType: "saga_test.shipRate", Event: saga.FaultType("shipment", "saga_test.shipRate")},
	}
	if !reflect.DeepEqual(d.Faults, wantFaults) {
		t.Errorf("Faults = %+v, want %+v", d.Faults, wantFaults)
	}
	i := slices.IndexFunc(d.Events, func(e saga.EventDescription) bool { return e.Type == "saga_test.shipReminder" })
	if e := d.Events[i]; !slices.Equal(e.HandledIn, []saga.State{"Ordered"}) || !slices.Equal(e.IgnoredIn, []saga.State{"Packed"}) {
		t.Errorf("reminder handled in %v, ignored in %v, want [Ordered], [Packed]", e.HandledIn, e.IgnoredIn)
	}
	if g := shipMachine(shipOpts{}).Graph(); !reflect.DeepEqual(g, d.Graph()) {
		t.Errorf("Machine.Graph() = %+v, want Describe().Graph() %+v", g, d.Graph())
	}
}

// TestDescribeHostileNames: NUL, markup and invalid UTF-8 in names encode,
// and fingerprint the same after a round trip through JSON.
func TestDescribeHostileNames(t *testing.T) {
	build := func() *saga.Machine[Order] {
		m := saga.New[Order]("evil\x00<script>")
		s := m.State("bad\xffstate")
		ev := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
		m.Initially(saga.When(ev).TransitionTo(s))
		return m
	}
	d := build().Describe()
	if d.Fingerprint() != build().Describe().Fingerprint() {
		t.Error("two builds of the hostile machine fingerprint differently")
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("<script>")) || bytes.IndexByte(b, 0) >= 0 {
		t.Errorf("encoding carries raw markup or NUL: %s", b)
	}
	var back saga.Description
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Fingerprint() != d.Fingerprint() {
		t.Errorf("hostile names: decoded fingerprint %s, want %s", back.Fingerprint(), d.Fingerprint())
	}
}

package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/deploycheck"
	"github.com/idemhq/idem/internal/engineaccess"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// Deploys (docs/deploys.md) as the API and the console show them: per
// saga type, the definitions engines recorded and the replicas that run
// each, the live sagas by state, and the deploy check of the machines
// this engine registers against what the store holds now.

// Deploys is the answer of GET /api/deploys.
type Deploys struct {
	// ReadAt is when the store was read. The census counts every live
	// saga, so neither the page nor the API reads it on a timer.
	ReadAt time.Time `json:"read_at"`
	// Machines are the saga types this engine registers, sorted: the
	// build the check is of. Empty when it registers none (an idem serve
	// without machines): Check is then null.
	Machines []string `json:"machines"`
	// Census is what the store holds (readmodel.Census); null when the
	// store cannot count it (no readmodel.Censuser): no live counts, no
	// check.
	Census *readmodel.Census `json:"census"`
	// Registry is set when the store keeps the definitions engines ran
	// (store.DefinitionStore). Without it, a saga type's definitions are
	// only those the replicas' heartbeats name.
	Registry bool `json:"registry"`
	// SagaTypes are the saga types the census, this engine or a replica
	// names, by name.
	SagaTypes []DeploySagaType `json:"saga_types"`
	// Check is the deploy check of Machines against the store (its
	// census is Census); null without machines or without a census.
	Check *deploycheck.Report `json:"check"`
}

// DeploySagaType is one saga type of Deploys.
type DeploySagaType struct {
	SagaType string `json:"saga_type"`
	// Fingerprint is the definition of the machine this engine registers
	// for the type; "" when it registers none.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Live counts its live sagas.
	Live   int64         `json:"live"`
	States []DeployState `json:"states"`
	// Definitions are those engines recorded, the first seen first, then
	// those that replicas' heartbeats name and no engine recorded.
	Definitions []DeployDefinition `json:"definitions"`
	// Hazards and Notices are the check's about this saga type that no
	// row of States holds (a state with no live saga, or none at all).
	Hazards []deploycheck.Hazard `json:"hazards"`
	Notices []deploycheck.Hazard `json:"notices"`
}

// DeployState counts the live sagas of a type in one state.
type DeployState struct {
	State string `json:"state"`
	Live  int64  `json:"live"`
	// Versions counts them by the schema version of their stored state.
	Versions []DeployVersion `json:"versions"`
	// Hazards are the check's hazards about this state.
	Hazards []deploycheck.Hazard `json:"hazards"`
}

// DeployVersion counts live sagas at one schema version.
type DeployVersion struct {
	SchemaVersion int   `json:"schema_version"`
	Live          int64 `json:"live"`
}

// DeployDefinition is one definition of a saga type.
type DeployDefinition struct {
	Fingerprint string `json:"fingerprint"`
	// Recorded is set for a definition in the registry; FirstSeen and
	// LastSeen are then when engines first and last started with it.
	Recorded  bool      `json:"recorded"`
	FirstSeen time.Time `json:"first_seen,omitzero"`
	LastSeen  time.Time `json:"last_seen,omitzero"`
	// Current is set on the definition of the machine this engine
	// registers.
	Current bool `json:"current"`
	// Replicas run it, whatever their state.
	Replicas []DeployReplica `json:"replicas"`
}

// DeployReplica is a replica that runs a definition: its state as the
// Replicas page judges it ("unknown" when its record was not among the
// replicas read), and whether it is the engine serving this API.
type DeployReplica struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Self  bool   `json:"self"`
}

// errNoDeploys is the error of a store that neither counts its live
// sagas nor keeps a definition registry.
var errNoDeploys = errors.New("the store neither counts its live sagas nor keeps the definitions engines ran")

// deployRead is one read of the store for Deploys.
type deployRead struct {
	out      *Deploys
	machines map[string]saga.Description
	replicas []store.Replica
	states   map[string]string // replica ID to state
	defs     map[string][]store.Definition
	types    map[string]*DeploySagaType
}

// readDeploys reads the census, the replicas and the definitions, and
// runs the deploy check of this engine's machines on what it read.
func (p *parts) readDeploys(ctx context.Context, now time.Time) (*Deploys, error) {
	if p.caps.census == nil && p.caps.definitions == nil {
		return nil, errNoDeploys
	}
	d := &deployRead{out: &Deploys{ReadAt: now, Machines: []string{}, SagaTypes: []DeploySagaType{}, Registry: p.caps.definitions != nil},
		machines: map[string]saga.Description{}, defs: map[string][]store.Definition{}, types: map[string]*DeploySagaType{}}
	for name, m := range p.e.Sagas() {
		d.machines[name] = m.Describe()
	}
	d.out.Machines = slices.Sorted(maps.Keys(d.machines))
	if err := p.readDeployStore(ctx, d, now); err != nil {
		return nil, err
	}
	if len(d.machines) > 0 && d.out.Census != nil {
		d.out.Check = p.deployCheck(d, now)
	}
	d.build(p.e.ReplicaID())
	return d.out, nil
}

// readDeployStore reads the census, the replicas and the definitions of
// every saga type named.
func (p *parts) readDeployStore(ctx context.Context, d *deployRead, now time.Time) error {
	var err error
	if p.caps.census != nil {
		if d.out.Census, err = p.caps.census.Census(ctx); err != nil {
			return fmt.Errorf("read the census: %w", err)
		}
	}
	if p.caps.replicas != nil {
		if d.replicas, err = p.caps.replicas.Replicas(ctx, maxLimit); err != nil {
			return fmt.Errorf("list replicas: %w", err)
		}
	}
	d.states = map[string]string{}
	for i, st := range replicaStates(d.replicas, now) {
		d.states[d.replicas[i].ID] = st
	}
	if p.caps.definitions == nil {
		return nil
	}
	for _, typ := range d.typeNames() {
		defs, err := p.caps.definitions.Definitions(ctx, typ)
		if err != nil {
			return fmt.Errorf("read the definitions of %q: %w", typ, err)
		}
		d.defs[typ] = defs
	}
	return nil
}

// typeNames are the saga types the census, the machines or the replicas
// name, sorted.
func (d *deployRead) typeNames() []string {
	names := map[string]bool{}
	for n := range d.machines {
		names[n] = true
	}
	if c := d.out.Census; c != nil {
		for _, s := range c.States {
			names[s.SagaType] = true
		}
	}
	for _, r := range d.replicas {
		for typ := range r.Definitions {
			names[typ] = true
		}
	}
	return slices.Sorted(maps.Keys(names))
}

// deployCheck compares the machines with what d read, as
// deploycheck.Check would: the recorded definitions of the saga types the
// machines or the census name, decoded.
func (p *parts) deployCheck(d *deployRead, now time.Time) *deploycheck.Report {
	started := time.Now()
	o := deploycheck.Options{Handled: engineaccess.Handled(p.e), Self: p.e.ReplicaID(), Now: now}
	for _, name := range d.out.Machines {
		o.Machines = append(o.Machines, d.machines[name])
	}
	in := &deploycheck.Input{Census: d.out.Census, Replicas: d.replicas, Previous: map[string][]deploycheck.Recorded{}}
	checked := map[string]bool{}
	for name := range d.machines {
		checked[name] = true
	}
	for _, s := range d.out.Census.States {
		checked[s.SagaType] = true
	}
	for typ := range checked {
		for _, def := range d.defs[typ] {
			r := deploycheck.Recorded{Definition: def}
			if err := json.Unmarshal(def.Description, &r.Description); err != nil {
				r.Description = saga.Description{} // recorded by a build this one cannot read
			}
			in.Previous[typ] = append(in.Previous[typ], r)
		}
	}
	r := deploycheck.Compare(in, o)
	r.Census = nil // the answer's Census
	r.Took = time.Since(started)
	return r
}

// build fills d.out.SagaTypes from what d read and the check.
func (d *deployRead) build(self string) {
	names := d.typeNames()
	for _, n := range names {
		t := &DeploySagaType{SagaType: n, States: []DeployState{}, Definitions: []DeployDefinition{}, Hazards: []deploycheck.Hazard{}, Notices: []deploycheck.Hazard{}}
		if m, ok := d.machines[n]; ok {
			t.Fingerprint = m.Fingerprint()
		}
		d.types[n] = t
	}
	d.liveStates()
	for _, n := range names {
		d.definitions(d.types[n], self)
	}
	d.placeHazards()
	for _, n := range names {
		d.out.SagaTypes = append(d.out.SagaTypes, *d.types[n])
	}
}

// liveStates counts the census's live sagas by type and state.
func (d *deployRead) liveStates() {
	if d.out.Census == nil {
		return
	}
	row := map[[2]string]int{} // type and state to the index of its row
	for _, s := range d.out.Census.States {
		t := d.types[s.SagaType]
		t.Live += s.Count
		i, ok := row[[2]string{s.SagaType, s.State}]
		if !ok {
			i = len(t.States)
			row[[2]string{s.SagaType, s.State}] = i
			t.States = append(t.States, DeployState{State: s.State, Versions: []DeployVersion{}, Hazards: []deploycheck.Hazard{}})
		}
		st := &t.States[i]
		st.Live += s.Count
		st.Versions = append(st.Versions, DeployVersion{SchemaVersion: s.SchemaVersion, Live: s.Count})
	}
}

// definitions lists t's recorded definitions, then those that replicas
// run and no engine recorded, each with its replicas.
func (d *deployRead) definitions(t *DeploySagaType, self string) {
	replica := func(id string) DeployReplica {
		st, ok := d.states[id]
		if !ok {
			st = "unknown"
		}
		return DeployReplica{ID: id, State: st, Self: id == self}
	}
	recorded := map[string]bool{}
	for _, def := range d.defs[t.SagaType] {
		recorded[def.Fingerprint] = true
		row := DeployDefinition{Fingerprint: def.Fingerprint, Recorded: true, FirstSeen: def.FirstSeen, LastSeen: def.LastSeen,
			Current: def.Fingerprint == t.Fingerprint, Replicas: []DeployReplica{}}
		for _, id := range def.Replicas {
			row.Replicas = append(row.Replicas, replica(id))
		}
		t.Definitions = append(t.Definitions, row)
	}
	unrecorded := map[string][]DeployReplica{}
	for _, r := range d.replicas {
		if fp, ok := r.Definitions[t.SagaType]; ok && !recorded[fp] {
			unrecorded[fp] = append(unrecorded[fp], replica(r.ID))
		}
	}
	for _, fp := range slices.Sorted(maps.Keys(unrecorded)) {
		rs := unrecorded[fp]
		slices.SortFunc(rs, func(a, b DeployReplica) int { return strings.Compare(a.ID, b.ID) })
		t.Definitions = append(t.Definitions, DeployDefinition{Fingerprint: fp, Current: fp == t.Fingerprint, Replicas: rs})
	}
}

// placeHazards puts each of the check's hazards on the state row it
// concerns, else on its saga type; a hazard of no saga type (a message
// type nothing consumes) stays in the check alone.
func (d *deployRead) placeHazards() {
	r := d.out.Check
	if r == nil {
		return
	}
	for _, h := range r.Hazards {
		t := d.types[h.SagaType]
		if t == nil {
			continue
		}
		if i := slices.IndexFunc(t.States, func(s DeployState) bool { return h.State != "" && s.State == h.State }); i >= 0 {
			t.States[i].Hazards = append(t.States[i].Hazards, h)
			continue
		}
		t.Hazards = append(t.Hazards, h)
	}
	for _, h := range r.Notices {
		if t := d.types[h.SagaType]; t != nil {
			t.Notices = append(t.Notices, h)
		}
	}
}

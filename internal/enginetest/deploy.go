package enginetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/deploycheck"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// The deploy saga: an order that waits for payment (with an overdue
// timer), is packed, then shipped. deployDef's fields change one thing
// each, as an edit between two builds would.
type (
	deployOrder struct {
		Customer string
		Paid     int
	}
	// DeployPlaced starts a deploy saga.
	DeployPlaced struct{ ID, Customer string }
	// DeployPaid pays for one.
	DeployPaid struct{ ID string }
	// DeployPacked packs one.
	DeployPacked struct{ ID string }
	// DeployOverdue is its payment timer.
	DeployOverdue struct{ ID string }
)

// deployDef is one build of the deploy saga. The zero value is
// definition A: an upgrade from schema version 1, so its state documents
// are at version 2.
type deployDef struct {
	upgrades      []int // the upgrade steps' from-versions; nil: [1]; empty: none (version 1)
	noPacking     bool  // paid goes straight to Shipped; no Packing, no DeployPacked
	overdueMoved  bool  // AwaitingPayment no longer handles the overdue timer (Packing does)
	noOverdue     bool  // no overdue event at all
	noAttribute   bool  // the customer attribute is gone
	newAuditState bool  // packing leads to a new final state, Audited
	// unhandledIgnore ignores unhandled events: another definition that
	// a replica of A can serve beside it.
	unhandledIgnore bool
	// review puts a new state, Review, between payment and packing.
	review bool
	// migrate declares the migrations that serve what the other fields
	// removed: with noPacking, Packing's sagas are Shipped and DeployPacked
	// messages are DeployPaid; with noOverdue, the pending overdue timers
	// fire DeployPaid.
	migrate bool
}

func deployMachine(d deployDef) *saga.Machine[deployOrder] {
	m := saga.New[deployOrder]("deploy-order")
	upgrades := d.upgrades
	if upgrades == nil {
		upgrades = []int{1}
	}
	for _, from := range upgrades {
		m.Upgrade(from, func(old json.RawMessage) (json.RawMessage, error) { return old, nil })
	}
	if !d.noAttribute {
		m.Attribute("customer", func(o deployOrder) string { return o.Customer })
	}
	awaiting, shipped, cancelled := m.State("AwaitingPayment"), m.Final("Shipped"), m.Final("Cancelled")
	placed := saga.NewEvent[DeployPlaced](m, func(e DeployPlaced) string { return e.ID })
	paid := saga.NewEvent[DeployPaid](m, func(e DeployPaid) string { return e.ID })
	m.Initially(saga.When(placed).Then(func(c *saga.Context[deployOrder], e DeployPlaced) error {
		c.Data.Customer = e.Customer
		c.Schedule("overdue", time.Hour, DeployOverdue{ID: e.ID})
		return nil
	}).TransitionTo(awaiting))
	if d.unhandledIgnore {
		m.OnUnhandled(saga.UnhandledIgnore)
	}
	if d.noPacking {
		overdue := saga.NewEvent[DeployOverdue](m, func(e DeployOverdue) string { return e.ID })
		m.During(awaiting, saga.Ignore(placed), saga.When(paid).TransitionTo(shipped), saga.When(overdue).TransitionTo(cancelled))
		if d.migrate {
			m.MigrateState("Packing", shipped)
			m.RenameMessage(saga.MessageType(DeployPacked{}), saga.MessageType(DeployPaid{}))
		}
		return m
	}
	packing := m.State("Packing")
	packed := saga.NewEvent[DeployPacked](m, func(e DeployPacked) string { return e.ID })
	done := shipped
	if d.newAuditState {
		done = m.Final("Audited")
	}
	afterPaid := packing
	if d.review {
		afterPaid = m.State("Review")
		m.During(afterPaid, saga.Ignore(placed), saga.Ignore(paid), saga.When(packed).TransitionTo(done))
	}
	inAwaiting := []saga.Behavior[deployOrder]{saga.Ignore(placed), saga.When(paid).TransitionTo(afterPaid), saga.Ignore(packed)}
	inPacking := []saga.Behavior[deployOrder]{saga.Ignore(placed), saga.Ignore(paid), saga.When(packed).TransitionTo(done)}
	if d.noOverdue && d.migrate { // the pending overdue timers now fire a payment
		m.RenameMessage(saga.MessageType(DeployOverdue{}), saga.MessageType(DeployPaid{}))
	}
	if !d.noOverdue {
		overdue := saga.NewEvent[DeployOverdue](m, func(e DeployOverdue) string { return e.ID })
		if d.overdueMoved {
			inPacking = append(inPacking, saga.When(overdue).TransitionTo(cancelled))
		} else {
			inAwaiting = append(inAwaiting, saga.When(overdue).TransitionTo(cancelled))
			inPacking = append(inPacking, saga.Ignore(overdue))
		}
	}
	m.During(awaiting, inAwaiting...)
	m.During(packing, inPacking...)
	return m
}

// deployRig is a store with live deploy sagas made under definition A:
// five placed (five overdue timers, five customer attributes), two of
// them paid (now Packing, their timers cancelled), and one DeployPacked
// message queued while no engine runs.
type deployRig struct {
	t  *testing.T
	st store.Queue
}

func newDeployRig(t *testing.T, st store.Queue) *deployRig {
	r := &deployRig{t: t, st: st}
	e := r.start(deployDef{}, nil)
	var envs []idem.Envelope
	for i := range 5 {
		envs = append(envs, r.envelope(e, fmt.Sprintf("placed-%d", i), DeployPlaced{ID: fmt.Sprintf("o-%d", i), Customer: fmt.Sprintf("c-%d", i)}))
	}
	r.publish(e, envs...)
	r.waitStates(e, map[string]int64{"AwaitingPayment": 5})
	r.publish(e, r.envelope(e, "paid-0", DeployPaid{ID: "o-0"}), r.envelope(e, "paid-1", DeployPaid{ID: "o-1"}))
	r.waitStates(e, map[string]int64{"AwaitingPayment": 3, "Packing": 2})
	if err := e.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Queued behind a stopped fleet: the next build must consume it.
	if err := st.Publish(t.Context(), []idem.Envelope{r.envelope(e, "packed-0", DeployPacked{ID: "o-0"})}); err != nil {
		t.Fatal(err)
	}
	return r
}

// start starts an engine of definition d on the rig's store.
func (r *deployRig) start(d deployDef, cfg *idem.Config) *idem.Engine {
	r.t.Helper()
	e, err := r.engine(d, cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := e.Start(r.t.Context()); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = e.Stop(context.WithoutCancel(r.t.Context())) })
	return e
}

func (r *deployRig) engine(d deployDef, cfg *idem.Config) (*idem.Engine, error) {
	if cfg == nil {
		cfg = &idem.Config{}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.TimerInterval = 20 * time.Millisecond
	e, err := idem.NewEngine(r.st, r.st, cfg)
	if err != nil {
		return nil, err
	}
	return e, e.Register(deployMachine(d))
}

func (r *deployRig) envelope(e *idem.Engine, id string, msg any) idem.Envelope {
	r.t.Helper()
	env, err := e.NewEnvelope(id, msg)
	if err != nil {
		r.t.Fatal(err)
	}
	return env
}

func (r *deployRig) publish(e *idem.Engine, envs ...idem.Envelope) {
	r.t.Helper()
	if err := e.Publish(r.t.Context(), envs...); err != nil {
		r.t.Fatal(err)
	}
}

// waitStates waits until the live deploy sagas are in want's states and
// the queue is empty.
func (r *deployRig) waitStates(e *idem.Engine, want map[string]int64) {
	r.t.Helper()
	WaitFor(r.t, 30*time.Second, fmt.Sprintf("live sagas in %v", want), func() (bool, error) {
		if err := e.Ready(); err != nil {
			return false, err
		}
		c, err := r.census()
		if err != nil {
			return false, err
		}
		got := map[string]int64{}
		for _, s := range c.States {
			got[s.State] += s.Count
		}
		queued := slices.ContainsFunc(c.Messages, func(m readmodel.MessageCount) bool { return m.Where == readmodel.InQueue })
		return fmt.Sprint(got) == fmt.Sprint(want) && !queued, nil
	})
}

func (r *deployRig) census() (*readmodel.Census, error) {
	return r.st.(readmodel.Censuser).Census(r.t.Context())
}

// check checks definition d against the rig's store.
func (r *deployRig) check(d deployDef) *deploycheck.Report {
	r.t.Helper()
	rep, err := deploycheck.Check(r.t.Context(), r.st, deploycheck.Options{Machines: []saga.Description{deployMachine(d).Describe()}})
	if err != nil {
		r.t.Fatal(err)
	}
	return rep
}

// Deploy checks changed builds of the deploy saga against live sagas made
// under definition A on q, one hazard kind at a time, each with the exact
// count behind it, then the start-up gate (Config.DeployCheck) and a
// mixed fleet.
func Deploy(t *testing.T, q store.Queue) {
	r := newDeployRig(t, q)
	packed, overdue := saga.MessageType(DeployPacked{}), saga.MessageType(DeployOverdue{})
	for _, c := range []struct {
		name string
		def  deployDef
		want []string
	}{
		{"the same definition", deployDef{}, nil},
		{"a new final state nothing is in", deployDef{newAuditState: true}, nil},
		{"a state removed", deployDef{noPacking: true}, []string{
			"message-unconsumed   " + packed + " 1", "state-removed deploy-order Packing  2"}},
		{"a state removed, with its migrations declared", deployDef{noPacking: true, migrate: true}, nil},
		{"a timer's event moved out of the state", deployDef{overdueMoved: true}, []string{
			"event-refused deploy-order AwaitingPayment " + overdue + " 3"}},
		{"a timer's event removed", deployDef{noOverdue: true}, []string{
			"timer-orphaned deploy-order AwaitingPayment " + overdue + " 3", "timer-orphaned deploy-order Packing " + overdue + " 2"}},
		{"a timer's event removed, retargeted by a rename", deployDef{noOverdue: true, migrate: true}, nil},
		{"a gap in the upgrades", deployDef{upgrades: []int{1, 3}}, []string{
			"schema-no-upgrade deploy-order AwaitingPayment  3", "schema-no-upgrade deploy-order Packing  2"}},
		{"a rollback past a schema change", deployDef{upgrades: []int{}}, []string{
			"schema-too-new deploy-order AwaitingPayment  3", "schema-too-new deploy-order Packing  2"}},
		{"an attribute removed", deployDef{noAttribute: true}, []string{
			"attribute-removed deploy-order  customer 5"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := r.check(c.def)
			if got := hazardRows(rep.Hazards); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("hazards:\n got %q\nwant %q", got, c.want)
			}
			if rep.Live["deploy-order"] != 5 {
				t.Errorf("live sagas counted: %d, want 5", rep.Live["deploy-order"])
			}
		})
	}
	t.Run("the saga type removed", func(t *testing.T) {
		rep, err := deploycheck.Check(t.Context(), q, deploycheck.Options{})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"message-unconsumed   " + packed + " 1", "saga-type-removed deploy-order AwaitingPayment  3", "saga-type-removed deploy-order Packing  2"}
		if got := hazardRows(rep.Hazards); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("hazards:\n got %q\nwant %q", got, want)
		}
	})
	t.Run("the start-up gate refuses and records nothing", func(t *testing.T) {
		e, err := r.engine(deployDef{noPacking: true}, &idem.Config{DeployCheck: idem.DeployCheckRefuse})
		if err != nil {
			t.Fatal(err)
		}
		err = e.Start(t.Context())
		var sce *idem.StartCheckError
		if !errors.As(err, &sce) || sce.Check != "deploy" || !strings.Contains(err.Error(), "state-removed") || !strings.Contains(err.Error(), "2 live saga(s) in state \"Packing\"") {
			t.Fatalf("Start with a removed state under DeployCheckRefuse: %v; want the deploy check's refusal naming state-removed and the 2 sagas", err)
		}
		fp := deployMachine(deployDef{noPacking: true}).Describe().Fingerprint()
		defs, err := q.(store.DefinitionStore).Definitions(t.Context(), "deploy-order")
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(defs, func(d store.Definition) bool { return d.Fingerprint == fp }) {
			t.Error("the refused build's definition was recorded")
		}
	})
	t.Run("a mixed fleet", func(t *testing.T) {
		a := r.start(deployDef{}, nil)
		r.waitStates(a, map[string]int64{"AwaitingPayment": 3, "Packing": 1}) // A consumed the queued DeployPacked
		WaitFor(t, 30*time.Second, "A's heartbeat with its definition", func() (bool, error) {
			rs, err := q.(store.ReplicaRegistry).Replicas(t.Context(), 100)
			return slices.ContainsFunc(rs, func(x store.Replica) bool { return x.ID == a.ReplicaID() && x.Definitions["deploy-order"] != "" }), err
		})
		rep := r.check(deployDef{newAuditState: true})
		if len(rep.Hazards) != 1 || rep.Hazards[0].Kind != deploycheck.MixedFleet || rep.Hazards[0].Count != 1 || !strings.Contains(rep.Hazards[0].Detail, "Audited") {
			t.Errorf("a new state beside a live replica of A: hazards %+v; want one mixed-fleet hazard naming Audited", rep.Hazards)
		}
		rep = r.check(deployDef{unhandledIgnore: true})
		if !rep.OK() || len(rep.Notices) != 1 || rep.Notices[0].Kind != deploycheck.MixedFleet {
			t.Errorf("a definition A's replica can serve beside: hazards %+v, notices %+v; want one mixed-fleet notice", rep.Hazards, rep.Notices)
		}
		if err := a.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if rep = r.check(deployDef{newAuditState: true}); !rep.OK() {
			t.Errorf("with A's replica stopped: hazards %+v; want none", rep.Hazards)
		}
	})
	t.Run("declared migrations apply on load, journaled", func(t *testing.T) {
		b, err := r.engine(deployDef{noPacking: true, migrate: true}, &idem.Config{DeployCheck: idem.DeployCheckRefuse})
		if err != nil {
			t.Fatal(err)
		}
		// o-1 is still stored in Packing; its next message is of the renamed type.
		if err := q.Publish(t.Context(), []idem.Envelope{r.envelope(b, "packed-1", DeployPacked{ID: "o-1"})}); err != nil {
			t.Fatal(err)
		}
		if err := b.Start(t.Context()); err != nil {
			t.Fatalf("Start of a build whose migrations serve the store, under DeployCheckRefuse: %v", err)
		}
		t.Cleanup(func() { _ = b.Stop(context.WithoutCancel(t.Context())) })
		r.waitStates(b, map[string]int64{"AwaitingPayment": 3})
		j, err := q.Journal(t.Context(), store.Key{SagaType: "deploy-order", Key: "o-1"})
		if err != nil {
			t.Fatal(err)
		}
		var moves []string
		for _, e := range j {
			if e.EventType == saga.MigrationEvent {
				moves = append(moves, e.FromState+">"+e.ToState)
				if len(e.State) == 0 { // the history computes the next step's change from it
					t.Errorf("the migration's journal entry carries no state document")
				}
			}
		}
		if fmt.Sprint(moves) != "[Packing>Shipped]" {
			t.Errorf("o-1's journal records migrations %v; want one, Packing>Shipped", moves)
		}
		if dls, err := q.ListDeadLetters(t.Context(), &store.ListParams{Limit: 10}); err != nil || len(dls) != 0 {
			t.Errorf("dead letters %+v, %v; want none", dls, err)
		}
	})
}

// DeployMixedFleet proves that a saga in a state only the new build knows
// is never dead-lettered by a replica of the old build: the old replica
// gives its message back (saga.ErrUnknownState) until a replica of the new
// build handles it.
func DeployMixedFleet(t *testing.T, q store.Queue) {
	r := &deployRig{t: t, st: q}
	fast := func() *idem.Config {
		return &idem.Config{RetryBase: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond, MaxAttempts: 1000}
	}
	b := r.start(deployDef{review: true}, fast())
	r.publish(b, r.envelope(b, "placed-r", DeployPlaced{ID: "o-r", Customer: "c"}), r.envelope(b, "paid-r", DeployPaid{ID: "o-r"}))
	r.waitStates(b, map[string]int64{"Review": 1})
	if err := b.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	a := r.start(deployDef{}, fast()) // the old build: it has no Review
	r.publish(a, r.envelope(a, "packed-r", DeployPacked{ID: "o-r"}))
	rr := q.(store.RetryRecorder)
	WaitFor(t, 30*time.Second, "the old replica to give the message back twice", func() (bool, error) {
		rs, err := rr.Retries(t.Context(), store.Key{SagaType: "deploy-order", Key: "o-r"})
		return len(rs) == 1 && rs[0].Attempts >= 2 && strings.Contains(rs[0].Error, "state unknown to this definition"), err
	})
	r.start(deployDef{review: true}, fast()) // the new build joins the fleet
	WaitFor(t, 30*time.Second, "the new replica to ship o-r", func() (bool, error) {
		c, err := r.census()
		return err == nil && len(c.States) == 0, err
	})
	dls, err := q.ListDeadLetters(t.Context(), &store.ListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 0 {
		t.Errorf("dead letters %+v; want none: the deploy caused them", dls)
	}
}

// hazardRows writes each hazard as "kind type state event count".
func hazardRows(hs []deploycheck.Hazard) []string {
	var out []string
	for _, h := range hs {
		out = append(out, fmt.Sprintf("%s %s %s %s %d", h.Kind, h.SagaType, h.State, h.Event, h.Count))
	}
	return out
}

package ledger

import (
	"errors"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
)

// SagaType is the saga type of the per-patient dispatch saga.
const SagaType = "dispatch-patient"

// Message type names (stable, they are stored in queues and dead letters).
const (
	TypeRequested = "dispatch.requested"
	TypeConfirmed = "dispatch.confirmed"
	TypeLaunched  = "dispatch.launched"
	TypeCancelled = "dispatch.cancelled"
)

// The four inbound events. They carry the patient's pseudonym, never the raw
// id; Envelope builds them from an Event.
type (
	// MissionRequested opens a mission.
	MissionRequested Event
	// MissionConfirmed confirms the patient's open mission.
	MissionConfirmed Event
	// MissionLaunched launches the patient's confirmed mission.
	MissionLaunched Event
	// MissionCancelled cancels the patient's open mission.
	MissionCancelled Event
)

// MessageType implements saga.Typer.
func (MissionRequested) MessageType() string { return TypeRequested }

// MessageType implements saga.Typer.
func (MissionConfirmed) MessageType() string { return TypeConfirmed }

// MessageType implements saga.Typer.
func (MissionLaunched) MessageType() string { return TypeLaunched }

// MessageType implements saga.Typer.
func (MissionCancelled) MessageType() string { return TypeCancelled }

// Validate refuses a malformed event when it is decoded (the engine then
// dead-letters it).
func (e MissionRequested) Validate() error { return Event(e).Check() }

// Validate refuses a malformed event when it is decoded.
func (e MissionConfirmed) Validate() error { return Event(e).Check() }

// Validate refuses a malformed event when it is decoded.
func (e MissionLaunched) Validate() error { return Event(e).Check() }

// Validate refuses a malformed event when it is decoded.
func (e MissionCancelled) Validate() error { return Event(e).Check() }

// Envelope returns the envelope of ev as a writer publishes it. Its ID is the
// event's identity, so two writers that receive the same event publish the
// same envelope ID and Idem's inbox applies it once.
func Envelope(ev Event) (idem.Envelope, error) {
	if err := ev.Check(); err != nil {
		return idem.Envelope{}, fmt.Errorf("envelope for %s/%d: %w", ev.Patient, ev.Seq, err)
	}
	var msg any
	switch ev.Kind {
	case Requested:
		msg = MissionRequested(ev)
	case Confirmed:
		msg = MissionConfirmed(ev)
	case Launched:
		msg = MissionLaunched(ev)
	case Cancelled:
		msg = MissionCancelled(ev)
	}
	env, err := idem.NewEnvelope(ev.ID(), msg)
	if err != nil {
		return idem.Envelope{}, err
	}
	env.CorrelationID = ev.Patient
	return env, nil
}

// Patient is the saga's state document: where the patient's event sequence
// stands.
type Patient struct {
	// LastSeq is the sequence number of the last event accepted.
	LastSeq int64 `json:"last_seq"`
	// Mission is the sequence number of the REQUESTED of the current mission.
	Mission int64 `json:"mission"`
	// Kinds holds the kind of every accepted event, one letter per sequence
	// number from 1 to LastSeq (R, C, L or X for REQUESTED, CONFIRMED,
	// LAUNCHED and CANCELLED): with the patient (the saga key), the seq and
	// the kind, it is the accepted event's identity, so a late event at an
	// old seq is told apart from a conflicting one. One byte per event.
	Kinds string `json:"kinds"`
}

// kindLetters maps each kind to its letter in Patient.Kinds.
var kindLetters = map[Kind]byte{Requested: 'R', Confirmed: 'C', Launched: 'L', Cancelled: 'X'}

// KindAt returns the kind of the event accepted at seq, and false when no
// event was accepted there.
func (p Patient) KindAt(seq int64) (Kind, bool) {
	if seq < 1 || seq > int64(len(p.Kinds)) {
		return "", false
	}
	for k, l := range kindLetters {
		if l == p.Kinds[seq-1] {
			return k, true
		}
	}
	return "", false
}

// Machine is the per-patient dispatch saga with its states.
type Machine struct {
	*saga.Machine[Patient]
	// Requested and Confirmed are the states of an open mission; Idle is
	// a patient whose last mission was launched or cancelled.
	Requested, Confirmed, Idle saga.State
}

// errIllegal explains an event that may not follow the patient's last one.
var errIllegal = errors.New("illegal transition")

// errEarly explains an event that arrived before its predecessor.
var errEarly = errors.New("event arrived before the patient's previous event")

// ErrConflict is wrapped by the dead letter of an event whose sequence
// number already holds another accepted event (another kind): the two
// cannot both be true, and the first one accepted stands.
var ErrConflict = errors.New("sequence number already holds another event")

// NewMachine builds the per-patient dispatch saga, which appends each
// event it accepts with a. Its key is the patient's pseudonym, so one
// patient's events are applied one at a time, in sequence order, under the
// store's optimistic concurrency:
//
//   - an event whose seq is at most the last accepted one is a late or
//     concurrent duplicate, and is ignored (nothing written), when it is
//     the event accepted at that seq (same identity); another event at
//     that seq (another kind) is refused with ErrConflict (dead-lettered);
//   - one whose seq is further ahead waits for its predecessor: it fails
//     with a transient error, which the engine retries with its
//     exponential backoff (OpenWriter sizes the attempts to outlast a
//     crashed writer's lease), then dead-letters;
//   - the next event is applied when the transition is legal, and then
//     appended to the ledger with its notification in the transaction
//     that commits the transition (see Appender); an illegal one is
//     dead-lettered.
func NewMachine(a Appender) *Machine {
	m := saga.New[Patient](SagaType)
	x := &Machine{
		Machine:   m,
		Requested: m.State("Requested"),
		Confirmed: m.State("Confirmed"),
		Idle:      m.State("Idle"),
	}
	corr := func(e Event) string { return e.Patient }
	requested := saga.NewEvent[MissionRequested](m, func(e MissionRequested) string { return corr(Event(e)) })
	confirmed := saga.NewEvent[MissionConfirmed](m, func(e MissionConfirmed) string { return corr(Event(e)) })
	launched := saga.NewEvent[MissionLaunched](m, func(e MissionLaunched) string { return corr(Event(e)) })
	cancelled := saga.NewEvent[MissionCancelled](m, func(e MissionCancelled) string { return corr(Event(e)) })

	// In the saga, the states carry the legality rules; the bodies only
	// check the sequence and record the event.
	m.Initially(
		step(a, requested, x.Requested, true),
		step(a, confirmed, x.Idle, false),
		step(a, launched, x.Idle, false),
		step(a, cancelled, x.Idle, false),
	)
	m.During(x.Requested,
		step(a, requested, x.Requested, false),
		step(a, confirmed, x.Confirmed, true),
		step(a, launched, x.Requested, false),
		step(a, cancelled, x.Idle, true),
	)
	m.During(x.Confirmed,
		step(a, requested, x.Confirmed, false),
		step(a, confirmed, x.Confirmed, false),
		step(a, launched, x.Idle, true),
		step(a, cancelled, x.Idle, true),
	)
	m.During(x.Idle,
		step(a, requested, x.Requested, true),
		step(a, confirmed, x.Idle, false),
		step(a, launched, x.Idle, false),
		step(a, cancelled, x.Idle, false),
	)
	return x
}

// step is what event M does in a state: ignored when stale, retried when
// early, and otherwise applied and appended (legal) or refused (illegal).
func step[M MissionRequested | MissionConfirmed | MissionLaunched | MissionCancelled](a Appender, ev *saga.Event[Patient, M], to saga.State, legal bool) saga.Behavior[Patient] {
	// A copy of the event accepted at its seq: the identity of the event
	// accepted there (patient, seq and kind) is the copy's.
	// A state stored before Kinds existed does not know the kind: such a
	// seq is taken for a copy, as it was then.
	stale := func(c *saga.Context[Patient], msg M) bool {
		e := Event(msg)
		if e.Seq > c.Data.LastSeq {
			return false
		}
		k, ok := c.Data.KindAt(e.Seq)
		return !ok || EventID(e.Patient, e.Seq, k) == e.ID()
	}
	return saga.When(ev).
		If(stale, func(b *saga.Activity[Patient, M]) *saga.Activity[Patient, M] { return b.Ignore() }).
		Then(func(c *saga.Context[Patient], msg M) error {
			e := Event(msg)
			if e.Seq <= c.Data.LastSeq {
				k, _ := c.Data.KindAt(e.Seq)
				return idem.Permanent(fmt.Errorf("%s at seq %d, which holds %s: %w", e.Kind, e.Seq, k, ErrConflict))
			}
			if e.Seq > c.Data.LastSeq+1 {
				// Not RetryAfter: the engine's growing backoff, with the
				// attempts OpenWriter allows, outlasts a lease.
				return fmt.Errorf("seq %d after %d: %w", e.Seq, c.Data.LastSeq, errEarly)
			}
			if !legal {
				return idem.Permanent(fmt.Errorf("%s (seq %d) in state %s: %w", e.Kind, e.Seq, c.Current(), errIllegal))
			}
			if err := a.append(c, e); err != nil {
				return err
			}
			c.Data.LastSeq = e.Seq
			c.Data.Kinds += string(kindLetters[e.Kind])
			if e.Kind == Requested {
				c.Data.Mission = e.Seq
			}
			return nil
		}).
		TransitionTo(to)
}

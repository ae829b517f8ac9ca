package idem

import (
	"fmt"
	"log/slog"

	"github.com/idemhq/idem/canon"
)

// registry holds what an engine consumes and schedules: saga machines by
// message and saga type, plain handlers, and schedules. Before Start its
// caller holds the Engine's lock around every call; from Start on it is
// read-only, and the pipeline reads it without a lock.
type registry struct {
	machines  map[string]Machine // by message type
	sagas     map[string]Machine // by saga type
	handlers  map[string]HandlerFunc
	schedules []*scheduleDef // registered with Every and Cron, saved at Start
	maxKeyLen int
}

func newRegistry(maxKeyLen int) *registry {
	return &registry{machines: map[string]Machine{}, sagas: map[string]Machine{}, handlers: map[string]HandlerFunc{}, maxKeyLen: maxKeyLen}
}

// empty reports whether nothing is registered.
func (r *registry) empty() bool {
	return len(r.machines) == 0 && len(r.handlers) == 0 && len(r.schedules) == 0
}

func (r *registry) register(m Machine, log *slog.Logger) error {
	if _, dup := r.sagas[m.Name()]; dup {
		return fmt.Errorf("idem: register saga %s: saga type already registered", m.Name())
	}
	types := m.MessageTypes()
	if len(types) == 0 {
		return fmt.Errorf("idem: register saga %s: it binds no message type: bind events with saga.NewEvent", m.Name())
	}
	for _, t := range types {
		if err := r.claimType(t); err != nil {
			return fmt.Errorf("idem: register saga %s: %w", m.Name(), err)
		}
	}
	for _, t := range types {
		r.machines[t] = m
	}
	r.sagas[m.Name()] = m
	if err := m.Validate(); err != nil {
		log.Warn("saga machine is incomplete", logSagaType, m.Name(), "problems", err.Error())
	}
	return nil
}

func (r *registry) handle(msgType string, fn HandlerFunc) error {
	if err := r.claimType(msgType); err != nil {
		return fmt.Errorf("idem: handle: %w", err)
	}
	r.handlers[msgType] = fn
	return nil
}

func (r *registry) claimType(t string) error {
	if m, ok := r.machines[t]; ok {
		return fmt.Errorf("message type %s already consumed by saga %s", t, m.Name())
	}
	if _, ok := r.handlers[t]; ok {
		return fmt.Errorf("message type %s already has a handler", t)
	}
	return nil
}

// addSchedule adds d unless a schedule of its name is registered.
func (r *registry) addSchedule(d *scheduleDef) error {
	for _, o := range r.schedules {
		if o.name == d.name {
			return fmt.Errorf("idem: schedule %q: already registered", d.name)
		}
	}
	r.schedules = append(r.schedules, d)
	return nil
}

// machine returns the machine that consumes message type typ.
func (r *registry) machine(typ string) (Machine, bool) {
	m, ok := r.machines[typ]
	return m, ok
}

// correlationID is the canonical key the saga consuming typ correlates
// msg to (see correlationID); ok is false when no saga of this engine
// consumes typ.
func (r *registry) correlationID(typ string, msg any) (key string, ok bool) {
	m, ok := r.machines[typ]
	if !ok {
		return "", false
	}
	return correlationID(m, msg, r.maxKeyLen), true
}

// template is NewEnvelope without an ID, with the correlation ID of the
// machine that consumes msg: a schedule's message.
func (r *registry) template(msg any) (Envelope, error) {
	env, err := NewEnvelope("template", msg)
	if err != nil {
		return env, err
	}
	env.ID = ""
	env.CorrelationID, _ = r.correlationID(env.Type, msg)
	return env, nil
}

// correlate sets an envelope's empty CorrelationID to the canonical key m
// correlates its body to, so that partitions follow the key. A body that
// does not decode, or has no valid key, is left alone: its consumer
// dead-letters it with the reason. It runs the machine's code, so callers
// hold no lock.
func correlate(m Machine, env *Envelope, maxKeyLen int) {
	if env.CorrelationID != "" {
		return
	}
	_, raw, err := m.Decode(env.Type, env.Body)
	if err != nil {
		return
	}
	if key, err := canon.Key(raw, maxKeyLen); err == nil {
		env.CorrelationID = key
	}
}

// correlationID is the canonical key m correlates msg to, or "" when msg
// has none or an invalid one (its consumer dead-letters it): an
// envelope's CorrelationID is always a value every transport can carry,
// and the NFC and NFD forms of a key partition alike.
func correlationID(m Machine, msg any, maxKeyLen int) string {
	raw, found := m.Correlate(msg)
	if !found {
		return ""
	}
	key, err := canon.Key(raw, maxKeyLen)
	if err != nil {
		return ""
	}
	return key
}

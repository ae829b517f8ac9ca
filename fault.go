package idem

import (
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/internal/canon"
	"github.com/idemhq/idem/internal/ids"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// faultRouter is a machine that opts in to fault events for some of the
// message types it emits (saga.Machine does, with saga.NewFault).
type faultRouter interface {
	FaultFor(msgType string) string
}

// faultFor returns the fault type m wants for its emissions of type typ.
func faultFor(m Machine, typ string) string {
	if fr, ok := m.(faultRouter); ok {
		return fr.FaultFor(typ)
	}
	return ""
}

// requestIDs gives each request sent with saga.Request.Send (in r.Emitted,
// encoded as out) an ID derived from the envelope ID of its own timeout
// timer (sched, encoded from r.Scheduled; Send schedules the timer just
// before the command), so that the saga recognises the request's response
// by that timer alone. A request whose timer was unscheduled in the same
// handler keeps its own ID.
func requestIDs(r *saga.Result, out []Envelope, sched []store.Timer) {
	for i, em := range r.Emitted {
		if em.RequestTimer == "" {
			continue
		}
		for j, s := range r.Scheduled {
			if s.Name == em.RequestTimer && s.Index == em.Index-1 {
				out[i].ID = saga.RequestID(sched[j].Envelope.ID)
			}
		}
	}
}

// fault adds to the lane's commit the fault event of a dead-lettered
// message whose sender asked for one (transport.HeaderFault), so the
// fault is written with the dead letter or not at all. Its ID is derived
// from the dead-lettered envelope's, so recording the dead letter again
// yields the same fault, which the sender's inbox skips.
func (l *lane) fault(it *item, reason string, err error) {
	env, ok := l.e.faultEnvelope(&it.d.Envelope, reason, storableText(err.Error()), l.now)
	if !ok {
		return
	}
	if l.e.trace.send != nil {
		l.sends = append(l.sends, l.e.trace.startEmission(l.ctx, &env))
	}
	l.ch.Outbox = append(l.ch.Outbox, store.OutboxMessage{Envelope: env, CreatedAt: l.now})
	l.res.outbox = append(l.res.outbox, env)
	l.res.counts.emitted++
}

// faultEnvelope builds the fault of dead-lettered env, or reports false
// when env asks for none or its fault headers are not a valid address.
func (e *Engine) faultEnvelope(env *transport.Envelope, reason, errText string, now time.Time) (Envelope, bool) {
	typ, sagaType, key := env.Headers[transport.HeaderFault], env.Headers[transport.HeaderSagaType], env.Headers[transport.HeaderSagaKey]
	if typ == "" || sagaType == "" || key == "" || typ != saga.FaultType(sagaType, env.Type) {
		return Envelope{}, false
	}
	if k, err := canon.Key(key, e.cfg.MaxKeyLen); err != nil || k != key {
		return Envelope{}, false
	}
	f := saga.Fault[json.RawMessage]{
		SagaKey: key, MessageID: env.ID, MessageType: env.Type, Reason: reason, Error: errText, At: now,
	}
	if json.Valid(env.Body) {
		f.Message = env.Body
	}
	body, err := json.Marshal(f)
	if err == nil && len(body) > e.cfg.MaxBodyBytes {
		f.Message, f.Error = nil, truncate(errText, 1024)
		body, err = json.Marshal(f)
	}
	if err != nil {
		return Envelope{}, false
	}
	out := Envelope{
		ID:            ids.Derive("fault", env.ID, env.Type),
		Type:          typ,
		CausationID:   env.ID,
		CorrelationID: key,
		SentAt:        now,
		Body:          body,
		Headers:       map[string]string{transport.HeaderIntent: string(saga.IntentPublish)},
	}
	if tp := env.Headers[transport.HeaderTraceParent]; tp != "" && len(tp) <= maxTraceParent {
		out.Headers[transport.HeaderTraceParent] = tp
	}
	if transport.ValidateEnvelope(&out) != nil || len(out.CausationID) > MaxIDBytes {
		// A hostile envelope's headers name no saga that can be trusted.
		return Envelope{}, false
	}
	return out, true
}

// truncate shortens s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

package idem

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/internal/ids"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// emitter builds the envelopes a unit of work writes: a transition's
// emissions and timers, and the fault events of dead letters. Their IDs
// are derived from the message that caused them, so applying it again
// yields the same envelopes.
type emitter struct {
	reg     *registry
	maxBody int
}

// maxTraceParent bounds the W3C traceparent header copied onto emissions
// (55 bytes in version 00); a longer value is not a trace context.
const maxTraceParent = 128

// encode builds the envelopes of an applied result: its emissions (out)
// and its timers (sched), with the request IDs their pairing gives.
func (m emitter) encode(it *item, r *saga.Result, now time.Time) (out []Envelope, sched []store.Timer, err error) {
	out = make([]Envelope, 0, len(r.Emitted))
	for _, em := range r.Emitted {
		env, err := m.emission(it, em.Type, em.Msg, string(em.Intent), "", em.Index, now)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, env)
	}
	sched = make([]store.Timer, 0, len(r.Scheduled))
	for _, s := range r.Scheduled {
		env, err := m.emission(it, s.Type, s.Msg, "timer", s.Name, s.Index, now)
		if err != nil {
			return nil, nil, err
		}
		sched = append(sched, store.Timer{SagaType: it.typ, Key: it.key, Name: s.Name, DueAt: s.DueAt, Envelope: env})
	}
	requestIDs(r, out, sched)
	return out, sched, nil
}

// emission builds the envelope of an emitted message or timer. Its ID is
// derived from the incoming message's dedup ID, the saga and the emission's
// index, so re-processing yields the same ID.
func (m emitter) emission(it *item, typ string, msg any, intent, timer string, index int, now time.Time) (Envelope, error) {
	body, err := json.Marshal(msg)
	if err != nil {
		return Envelope{}, fmt.Errorf("encode emitted %s: %w", typ, err)
	}
	if len(body) > m.maxBody {
		// No consumer would accept it, and a transport may refuse it.
		return Envelope{}, fmt.Errorf("emitted %s has a body of %d bytes, over the limit of %d (Config.MaxBodyBytes)", typ, len(body), m.maxBody)
	}
	env := Envelope{
		ID:          ids.Derive("emit", it.msgID, it.typ, it.key, strconv.Itoa(index), timer),
		Type:        typ,
		CausationID: it.d.Envelope.ID,
		SentAt:      now,
		Body:        body,
		Headers: map[string]string{
			transport.HeaderIntent:   intent,
			transport.HeaderSagaType: it.typ,
			transport.HeaderSagaKey:  it.key,
		},
	}
	tp := it.tp // the current span's, when a Tracer is set
	if tp == "" {
		tp = it.d.Envelope.Headers[transport.HeaderTraceParent]
	}
	if tp != "" && len(tp) <= maxTraceParent {
		env.Headers[transport.HeaderTraceParent] = tp
	}
	inheritFairness(&env, &it.d.Envelope)
	if timer != "" {
		env.Headers[transport.HeaderTimer] = timer
	} else if ft := faultFor(it.m, typ); ft != "" {
		env.Headers[transport.HeaderFault] = ft
	}
	if key, ok := m.reg.correlationID(typ, msg); ok {
		env.CorrelationID = key
	} else {
		// Consumed elsewhere (a handler, another engine): the message
		// continues the conversation of the one that caused it.
		env.CorrelationID = it.d.Envelope.CorrelationID
		if env.CorrelationID == "" {
			env.CorrelationID = it.key
		}
	}
	return env, nil
}

// inheritFairness copies the fairness headers of the message that caused
// env (docs/flow-control.md): a tenant's follow-ups stay in its share, at
// its weight and priority, in a queue that receives in fair order.
func inheritFairness(env, cause *Envelope) {
	for _, h := range [...]string{transport.HeaderFairnessKey, transport.HeaderFairnessWeight, transport.HeaderPriority} {
		if v, ok := cause.Headers[h]; ok {
			env.Headers[h] = v
		}
	}
}

// storableText makes s safe for any store's text column: U+0000 becomes
// the four characters \x00 and invalid UTF-8 becomes U+FFFD. Error texts
// quote the values they name, so this only matters for a user's error
// message that embeds hostile input.
func storableText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\\x00")
}

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
// timer (sched, encoded from r.Scheduled, found by the emission's
// RequestTimer and RequestTimerIndex; a Machine that leaves the index 0
// pairs by the older rule, the timer at Index-1), so that the saga recognises the
// request's response by that timer alone. A request whose timer was unscheduled in the same
// handler keeps its own ID.
func requestIDs(r *saga.Result, out []Envelope, sched []store.Timer) {
	for i, em := range r.Emitted {
		if em.RequestTimer == "" {
			continue
		}
		for j, s := range r.Scheduled {
			if s.Name == em.RequestTimer && (s.Index == em.RequestTimerIndex || em.RequestTimerIndex == 0 && s.Index == em.Index-1) {
				out[i].ID = saga.RequestID(sched[j].Envelope.ID)
			}
		}
	}
}

// fault builds the fault event of a dead-lettered message whose sender
// asked for one (transport.HeaderFault), or reports false when env asks for
// none or its fault headers are not a valid address. The lane writes it
// with the dead letter or not at all. Its ID is derived from the
// dead-lettered envelope's, so recording the dead letter again yields the
// same fault, which the sender's inbox skips.
func (m emitter) fault(env *transport.Envelope, reason, errText string, now time.Time) (Envelope, bool) {
	typ, sagaType, key := env.Headers[transport.HeaderFault], env.Headers[transport.HeaderSagaType], env.Headers[transport.HeaderSagaKey]
	if typ == "" || sagaType == "" || key == "" || typ != saga.FaultType(sagaType, env.Type) {
		return Envelope{}, false
	}
	if k, err := canon.Key(key, m.reg.maxKeyLen); err != nil || k != key {
		return Envelope{}, false
	}
	f := saga.Fault[json.RawMessage]{
		SagaKey: key, MessageID: env.ID, MessageType: env.Type, Reason: reason, Error: errText, At: now,
	}
	if json.Valid(env.Body) {
		f.Message = env.Body
	}
	body, err := json.Marshal(f)
	if err == nil && len(body) > m.maxBody {
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
	inheritFairness(&out, env)
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

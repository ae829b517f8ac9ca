package idem

import (
	"context"
	"maps"

	"github.com/idemhq/idem/transport"
)

// SendTracer is a Tracer that also traces what the engine sends: every
// envelope given to Publish or PublishWithTokens, and every message, timer
// and fault a transition emits. The span's trace context becomes the
// envelope's traceparent header (its creation context), so the consumer's
// message span, in this engine or another, continues the same trace.
// NewEngine looks for it once in Config.Tracer; otelidem's Tracer
// implements it. Like Tracer, it must be safe for concurrent use and must
// not block.
type SendTracer interface {
	Tracer
	// StartSend is called for each envelope before it is sent: for
	// Publish, in the caller's context, before the transport's Publish;
	// for an emission, in the context of the message span whose transition
	// emitted it, before the unit of work commits it to the outbox (or the
	// store's queue). An envelope that already carries a traceparent (a
	// creation context the producer chose) keeps it: the span links to it.
	// Otherwise the span's TraceParent is written into the envelope, and
	// the outbox row keeps it, so that the outbox relay, re-sending the row
	// after a crash, sends the same trace context.
	StartSend(ctx context.Context, s SendStart) SendSpan
}

// SendStart describes an envelope as the engine is about to send it.
type SendStart struct {
	// Envelope is the envelope to send. Tracers must not modify it.
	Envelope *Envelope
	// Transport describes the engine's transport (see transport.Describer).
	Transport *transport.Description
	// TraceParent is the traceparent the envelope carries already, which
	// it keeps; "" when the engine writes the span's.
	TraceParent string
	// Emitted is true for a transition's emissions, false for Publish.
	Emitted bool
}

// SendSpan is a send's span (see SendTracer).
type SendSpan interface {
	// TraceParent returns the span's W3C traceparent header value. When it
	// returns "", the envelope is sent without one.
	TraceParent() string
	// End ends the span: for Publish, when the transport accepted the
	// envelopes or failed (err); for an emission, when its unit of work
	// committed or failed (err; store.ErrConflict when the attempt lost an
	// optimistic-concurrency race and the emission was rolled back).
	End(err error)
}

// RequestTracer is a Tracer that also traces the HTTP requests through
// which messages enter an engine: the admin API's POST /api/messages
// starts a server span with it, in the trace of the request's traceparent
// header, and publishes in that span's context. otelidem's Tracer
// implements it. It must be safe for concurrent use.
type RequestTracer interface {
	StartRequest(ctx context.Context, r RequestStart) (context.Context, RequestSpan)
}

// RequestStart describes an HTTP request as a handler begins to serve it.
type RequestStart struct {
	// Method is the request's method ("POST").
	Method string
	// Route is the route that matched ("/api/messages"), not the raw path.
	Route string
	// Header is the request's header (an http.Header), from which the
	// caller's trace context is read. Tracers must not modify it.
	Header map[string][]string
}

// RequestSpan is an HTTP request's span (see RequestTracer).
type RequestSpan interface {
	// End ends the span with the response's status code.
	End(status int)
}

// tracing is the part of the engine that traces sends, resolved once in
// NewEngine. Its zero value traces nothing and costs a nil check.
type tracing struct {
	tracer Tracer     // Config.Tracer; nil: nothing is traced
	send   SendTracer // nil: sends are not traced
	// desc describes the transport; every span start points to it.
	desc transport.Description
}

func newTracing(t Tracer, desc transport.Description) *tracing {
	out := &tracing{tracer: t, desc: desc}
	out.send, _ = t.(SendTracer)
	return out
}

// background starts a background pass's span; the function returned ends
// it.
func (t *tracing) background(ctx context.Context, task BackgroundTask) (context.Context, func(n int, err error)) {
	if t.tracer == nil {
		return ctx, noBackground
	}
	ctx, span := t.tracer.StartBackground(ctx, task)
	return ctx, func(n int, err error) { span.End(BackgroundEnd{Items: n, Err: err}) }
}

// noBackground ends no span.
func noBackground(int, error) {}

// startMessage starts the span of one message of an attempt; the context
// returned is the one its handler, store calls and log lines see. Unless
// sends are traced, the span's traceparent is what its emissions carry.
// (tracerObserver ends it.)
func (t *tracing) startMessage(ctx context.Context, it *item) (context.Context, MessageSpan) {
	ctx, s := t.tracer.StartMessage(ctx, MessageStart{
		SagaType: it.typ, Key: it.key, MessageID: it.msgID, Envelope: &it.d.Envelope,
		Attempt: it.d.Attempt, TraceParent: it.d.Envelope.Headers[transport.HeaderTraceParent], Transport: &t.desc,
	})
	if t.send == nil {
		it.tp = s.TraceParent()
	}
	return ctx, s
}

// commonType is the saga type of every item, or "" when they have several.
func commonType(items []*item) string {
	typ := items[0].typ
	for _, it := range items[1:] {
		if it.typ != typ {
			return ""
		}
	}
	return typ
}

// uowStart describes the unit of work of items to the Tracer.
func (t *tracing) uowStart(items []*item) UnitOfWorkStart {
	u := UnitOfWorkStart{SagaType: commonType(items), Messages: len(items), Transport: &t.desc}
	for _, it := range items {
		if tp := it.d.Envelope.Headers[transport.HeaderTraceParent]; tp != "" {
			u.TraceParents = append(u.TraceParents, tp)
		}
	}
	return u
}

// sendSpans are the open send spans of one Publish.
type sendSpans []SendSpan

// startPublish starts a send span for each of envs (the caller's copies)
// and writes its trace context into the envelopes that carry none. It
// returns nil when sends are not traced.
func (t *tracing) startPublish(ctx context.Context, envs []Envelope) sendSpans {
	if t.send == nil {
		return nil
	}
	spans := make(sendSpans, len(envs))
	for i := range envs {
		spans[i] = t.startSend(ctx, &envs[i], false, true)
	}
	return spans
}

func (s sendSpans) end(err error) {
	for _, span := range s {
		span.End(err)
	}
}

// startSend starts env's send span and, unless env carries a traceparent,
// writes the span's into env's headers: into a copy of them when shared
// (they are the caller's), in place otherwise (the engine built them).
func (t *tracing) startSend(ctx context.Context, env *Envelope, emitted, shared bool) SendSpan {
	tp := env.Headers[transport.HeaderTraceParent]
	span := t.send.StartSend(ctx, SendStart{Envelope: env, Transport: &t.desc, TraceParent: tp, Emitted: emitted})
	if tp != "" {
		return span
	}
	if tp = span.TraceParent(); tp == "" {
		return span
	}
	if shared || env.Headers == nil {
		h := make(map[string]string, len(env.Headers)+1)
		maps.Copy(h, env.Headers)
		env.Headers = h
	}
	env.Headers[transport.HeaderTraceParent] = tp
	return span
}

// startEmission starts the send span of an envelope the engine built: its
// traceparent (the message span's, or the incoming message's) is replaced
// by the send span's, which is the message span's child.
func (t *tracing) startEmission(ctx context.Context, env *Envelope) SendSpan {
	delete(env.Headers, transport.HeaderTraceParent)
	return t.startSend(ctx, env, true, false)
}

package otelidem

import (
	"context"
	"errors"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// HTTP attribute keys of the server span of StartRequest.
const (
	attrHTTPMethod = attribute.Key("http.request.method")
	attrHTTPRoute  = attribute.Key("http.route")
	attrHTTPStatus = attribute.Key("http.response.status_code")
)

// StartSend implements idem.SendTracer: a producer span, a child of ctx's
// span (the caller's, or the message span whose transition emitted the
// envelope), whose context the engine writes into the envelope. When the
// envelope carries a creation context of its own, the span links to it.
func (t *Tracer) StartSend(ctx context.Context, s idem.SendStart) idem.SendSpan {
	env := s.Envelope
	attrs := make([]attribute.KeyValue, 0, 9)
	attrs = append(attrs, attrMsgSystem.String(system(s.Transport)), attrMsgOperation.String(opSend), attrMsgOpName.String(opSend),
		attrMsgID.String(env.ID), AttrMessageType.String(env.Type))
	if d := s.Transport; d != nil && d.Destination != "" {
		attrs = append(attrs, attrMsgDestination.String(d.Destination))
	}
	if env.CorrelationID != "" {
		attrs = append(attrs, attrMsgConversation.String(env.CorrelationID))
	}
	if typ, key := env.Headers[transport.HeaderSagaType], env.Headers[transport.HeaderSagaKey]; s.Emitted && typ != "" {
		attrs = append(attrs, AttrSagaType.String(typ), AttrSagaKey.String(key))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...)}
	if sc := parseTraceParent(s.TraceParent); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrLink.String(linkProducer)}}))
	}
	_, span := t.t.Start(ctx, "idem.send "+env.Type, opts...)
	return sendSpan{span}
}

type sendSpan struct{ s trace.Span }

func (s sendSpan) TraceParent() string { return formatTraceParent(s.s.SpanContext()) }

func (s sendSpan) End(err error) {
	if err != nil {
		et := sendErrorType(err)
		s.s.SetAttributes(attrErrorType.String(et))
		if et != "conflict" { // rolled back and applied again: not a failure
			s.s.RecordError(err)
			s.s.SetStatus(codes.Error, et)
		}
	}
	s.s.End()
}

// sendErrorType is the error.type of a send that failed with err: low
// cardinality, "_OTHER" for errors of no known class.
func sendErrorType(err error) string {
	switch {
	case errors.Is(err, store.ErrConflict):
		return "conflict"
	case errors.Is(err, transport.ErrTooLarge):
		return "too_large"
	case errors.Is(err, transport.ErrClosed):
		return "closed"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "_OTHER"
}

// StartRequest implements idem.RequestTracer: a server span named
// "<method> <route>", a child of the trace context of the request's W3C
// traceparent and tracestate headers (a root span without them).
func (t *Tracer) StartRequest(ctx context.Context, r idem.RequestStart) (context.Context, idem.RequestSpan) {
	ctx = traceContext.Extract(ctx, propagation.HeaderCarrier(r.Header))
	ctx, s := t.t.Start(ctx, r.Method+" "+r.Route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrHTTPMethod.String(r.Method), attrHTTPRoute.String(r.Route)))
	return ctx, requestSpan{s}
}

type requestSpan struct{ s trace.Span }

func (r requestSpan) End(status int) {
	r.s.SetAttributes(attrHTTPStatus.Int(status))
	if status >= 500 {
		r.s.SetAttributes(attrErrorType.String(strconv.Itoa(status)))
		r.s.SetStatus(codes.Error, "")
	}
	r.s.End()
}

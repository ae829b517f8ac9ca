package otelidem

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/transport"
)

// ScopeName is the instrumentation scope of the tracer's spans.
const ScopeName = "github.com/idemhq/idem/otelidem"

// Attribute keys of the spans (see the package documentation).
const (
	AttrSagaType        = attribute.Key("idem.saga.type")
	AttrSagaKey         = attribute.Key("idem.saga.key")
	AttrMessageType     = attribute.Key("idem.message.type")
	AttrDedupID         = attribute.Key("idem.message.dedup_id")
	AttrAttempt         = attribute.Key("idem.delivery.attempt")
	AttrOutcome         = attribute.Key("idem.outcome")
	AttrFrom            = attribute.Key("idem.state.from")
	AttrTo              = attribute.Key("idem.state.to")
	AttrReason          = attribute.Key("idem.dead_letter.reason")
	AttrUoWMessages     = attribute.Key("idem.uow.messages")
	AttrUoWAttempts     = attribute.Key("idem.uow.attempts")
	AttrUoWConflicts    = attribute.Key("idem.uow.conflicts")
	AttrUoWOutcome      = attribute.Key("idem.uow.outcome")
	AttrTask            = attribute.Key("idem.task")
	AttrItems           = attribute.Key("idem.items")
	AttrLink            = attribute.Key("idem.link")
	attrMsgSystem       = attribute.Key("messaging.system")
	attrMsgOperation    = attribute.Key("messaging.operation.type")
	attrMsgOpName       = attribute.Key("messaging.operation.name")
	attrMsgDestination  = attribute.Key("messaging.destination.name")
	attrMsgGroup        = attribute.Key("messaging.consumer.group.name")
	attrMsgBatchCount   = attribute.Key("messaging.batch.message_count")
	attrMsgID           = attribute.Key("messaging.message.id")
	attrMsgConversation = attribute.Key("messaging.message.conversation_id")
	attrErrorType       = attribute.Key("error.type")
)

// Operation names (messaging.operation.name and messaging.operation.type).
const (
	opProcess = "process"
	opSend    = "send"
)

// Link attribute values (AttrLink).
const (
	linkProducer   = "producer"
	linkUnitOfWork = "unit_of_work"
)

// Option configures NewTracer.
type Option func(*options)

type options struct {
	provider trace.TracerProvider
}

// WithTracerProvider makes the tracer use tp instead of the global
// TracerProvider (otel.GetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.provider = tp }
}

// Tracer implements idem.Tracer with OpenTelemetry. Create it with
// NewTracer; the zero value is not usable. It is safe for concurrent use.
type Tracer struct {
	t trace.Tracer
}

var (
	_ idem.SendTracer    = (*Tracer)(nil)
	_ idem.RequestTracer = (*Tracer)(nil)
)

// NewTracer returns a tracer for idem.Config.Tracer. Without
// WithTracerProvider it uses the global TracerProvider, including one set
// after NewTracer returns.
func NewTracer(opts ...Option) *Tracer {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.provider == nil {
		o.provider = otel.GetTracerProvider()
	}
	return &Tracer{t: o.provider.Tracer(ScopeName)}
}

// StartUnitOfWork implements idem.Tracer. The span links to the creation
// context of each of its messages, as the messaging conventions ask of a
// span that processes a batch.
func (t *Tracer) StartUnitOfWork(ctx context.Context, u idem.UnitOfWorkStart) (context.Context, idem.UnitOfWorkSpan) {
	attrs := consumerAttrs(u.Transport, AttrUoWMessages.Int(u.Messages), attrMsgBatchCount.Int(u.Messages))
	if u.SagaType != "" {
		attrs = append(attrs, AttrSagaType.String(u.SagaType))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...)}
	if len(u.TraceParents) > 0 {
		links := make([]trace.Link, 0, len(u.TraceParents))
		for _, tp := range u.TraceParents {
			if sc := parseTraceParent(tp); sc.IsValid() {
				links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrLink.String(linkProducer)}})
			}
		}
		opts = append(opts, trace.WithLinks(links...))
	}
	ctx, s := t.t.Start(ctx, "idem.unit_of_work", opts...)
	return ctx, uowSpan{s}
}

// system is the messaging.system of d: "idem" when the transport does not
// describe itself.
func system(d *transport.Description) string {
	if d == nil || d.System == "" {
		return "idem"
	}
	return d.System
}

// consumerAttrs are the messaging attributes of a span that processes
// messages taken from d, followed by more.
func consumerAttrs(d *transport.Description, more ...attribute.KeyValue) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, len(more)+5)
	attrs = append(attrs, attrMsgSystem.String(system(d)), attrMsgOperation.String(opProcess), attrMsgOpName.String(opProcess))
	if d != nil && d.Destination != "" {
		attrs = append(attrs, attrMsgDestination.String(d.Destination))
	}
	if d != nil && d.ConsumerGroup != "" {
		attrs = append(attrs, attrMsgGroup.String(d.ConsumerGroup))
	}
	return append(attrs, more...)
}

type uowSpan struct{ s trace.Span }

func (u uowSpan) End(end idem.UnitOfWorkEnd) {
	u.s.SetAttributes(AttrUoWAttempts.Int(end.Attempts), AttrUoWConflicts.Int(max(end.Attempts-1, 0)), AttrUoWOutcome.String(end.Outcome))
	if end.Err != nil && end.Outcome != idem.UnitSplit {
		u.s.RecordError(end.Err)
		u.s.SetAttributes(attrErrorType.String(end.Outcome))
		u.s.SetStatus(codes.Error, end.Outcome)
	}
	u.s.End()
}

// StartMessage implements idem.Tracer. The span is a child of the
// message's creation context (its send span, parsed from the envelope's
// traceparent), so that it continues the producer's trace, and links to
// it and to the unit of work (ctx's span); a message without a valid
// traceparent gets a child of the unit of work.
func (t *Tracer) StartMessage(ctx context.Context, m idem.MessageStart) (context.Context, idem.MessageSpan) {
	env := m.Envelope
	attrs := consumerAttrs(m.Transport,
		attrMsgID.String(env.ID), AttrMessageType.String(env.Type), AttrDedupID.String(m.MessageID),
		AttrAttempt.Int(m.Attempt),
	)
	if env.CorrelationID != "" {
		attrs = append(attrs, attrMsgConversation.String(env.CorrelationID))
	}
	if m.SagaType != "" {
		attrs = append(attrs, AttrSagaType.String(m.SagaType), AttrSagaKey.String(m.Key))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
	if sc := parseTraceParent(m.TraceParent); sc.IsValid() {
		links := []trace.Link{{SpanContext: sc, Attributes: []attribute.KeyValue{AttrLink.String(linkProducer)}}}
		if uow := trace.SpanContextFromContext(ctx); uow.IsValid() {
			links = append(links, trace.Link{SpanContext: uow, Attributes: []attribute.KeyValue{AttrLink.String(linkUnitOfWork)}})
		}
		opts = append(opts, trace.WithLinks(links...))
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	ctx, s := t.t.Start(ctx, "idem.message "+env.Type, opts...)
	return ctx, msgSpan{s}
}

type msgSpan struct{ s trace.Span }

func (m msgSpan) TraceParent() string { return formatTraceParent(m.s.SpanContext()) }

func (m msgSpan) End(end idem.MessageEnd) {
	attrs := []attribute.KeyValue{AttrOutcome.String(end.Outcome)}
	if end.From != "" || end.To != "" {
		attrs = append(attrs, AttrFrom.String(end.From), AttrTo.String(end.To))
	}
	if end.Reason != "" {
		attrs = append(attrs, AttrReason.String(end.Reason))
	}
	if et := messageErrorType(end); et != "" {
		attrs = append(attrs, attrErrorType.String(et))
	}
	m.s.SetAttributes(attrs...)
	if end.Outcome == idem.OutcomeDeadLettered || end.Outcome == idem.OutcomeFailed {
		if end.Err != nil {
			m.s.RecordError(end.Err)
		}
		m.s.SetStatus(codes.Error, end.Outcome)
	}
	m.s.End()
}

// messageErrorType is the error.type of a message whose processing
// failed in the attempt: the dead letter's reason, or the outcome of an
// attempt that did not apply it (retried, conflict, failed); "" when it
// did not fail.
func messageErrorType(end idem.MessageEnd) string {
	switch end.Outcome {
	case idem.OutcomeDeadLettered:
		if end.Reason != "" {
			return end.Reason
		}
		return end.Outcome
	case idem.OutcomeRetried, idem.OutcomeConflict, idem.OutcomeFailed:
		return end.Outcome
	}
	return ""
}

// StartBackground implements idem.Tracer. The span is recorded when the
// pass ends, and only when it handled something or failed.
func (t *Tracer) StartBackground(ctx context.Context, task idem.BackgroundTask) (context.Context, idem.BackgroundSpan) {
	return ctx, &bgSpan{t: t.t, ctx: ctx, task: task, start: time.Now()}
}

type bgSpan struct {
	t     trace.Tracer
	ctx   context.Context // the pass's parent context, for the span created at End
	task  idem.BackgroundTask
	start time.Time
}

func (b *bgSpan) End(end idem.BackgroundEnd) {
	if end.Items == 0 && end.Err == nil {
		return
	}
	_, s := b.t.Start(b.ctx, "idem.background "+string(b.task), trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(b.start),
		trace.WithAttributes(AttrTask.String(string(b.task)), AttrItems.Int(end.Items)))
	if end.Err != nil {
		s.RecordError(end.Err)
		s.SetStatus(codes.Error, "failed")
	}
	s.End()
}

var traceContext = propagation.TraceContext{}

// parseTraceParent returns the span context of a W3C traceparent value;
// an invalid one when tp is empty or malformed.
func parseTraceParent(tp string) trace.SpanContext {
	if tp == "" {
		return trace.SpanContext{}
	}
	ctx := traceContext.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx)
}

// formatTraceParent returns sc as a W3C traceparent value; "" when sc is
// not valid (a no-op TracerProvider's span).
func formatTraceParent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var b [55]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	const hexdig = "0123456789abcdef"
	b[0], b[1], b[2] = '0', '0', '-'
	for i, x := range tid {
		b[3+2*i], b[4+2*i] = hexdig[x>>4], hexdig[x&0xf]
	}
	b[35] = '-'
	for i, x := range sid {
		b[36+2*i], b[37+2*i] = hexdig[x>>4], hexdig[x&0xf]
	}
	b[52] = '-'
	f := byte(sc.TraceFlags())
	b[53], b[54] = hexdig[f>>4], hexdig[f&0xf]
	return string(b[:])
}

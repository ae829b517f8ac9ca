package otelidem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/otelidem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// Placed starts an order saga, which sends Ship.
type Placed struct {
	Order string `json:"order"`
}

// Ship is the command the order saga sends; a plain handler consumes it.
type Ship struct {
	Order string `json:"order"`
}

type orderData struct {
	Placed int `json:"placed"`
}

func orderMachine() *saga.Machine[orderData] {
	m := saga.New[orderData]("order")
	placedState := m.State("Placed")
	placed := saga.NewEvent[Placed](m, func(p Placed) string { return p.Order })
	m.Initially(saga.When(placed).Then(func(c *saga.Context[orderData], p Placed) error {
		c.Data.Placed++
		c.Send(Ship(p))
		return nil
	}).TransitionTo(placedState))
	m.During(placedState, saga.Ignore(placed))
	return m
}

var shipType = saga.MessageType(Ship{})

type setup struct {
	rec    *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	tracer *otelidem.Tracer
}

func newSetup(t *testing.T) *setup {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &setup{rec: rec, tp: tp, tracer: otelidem.NewTracer(otelidem.WithTracerProvider(tp))}
}

// producer returns a span standing for the application that publishes, and
// the traceparent it puts on its envelope.
func (s *setup) producer(t *testing.T) (trace.SpanContext, string) {
	t.Helper()
	_, span := s.tp.Tracer("test").Start(context.Background(), "publish")
	span.End()
	sc := span.SpanContext()
	return sc, fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return a.Value
		}
	}
	return attribute.Value{}
}

// spans returns the ended spans whose name starts with prefix and whose
// attributes match every pair of kv.
func (s *setup) spans(prefix string, kv ...attribute.KeyValue) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
next:
	for _, sp := range s.rec.Ended() {
		if !strings.HasPrefix(sp.Name(), prefix) {
			continue
		}
		for _, want := range kv {
			if attr(sp, want.Key) != want.Value {
				continue next
			}
		}
		out = append(out, sp)
	}
	return out
}

// waitFor polls cond until it holds or ten seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func startEngine(t *testing.T, st store.Store, tr transport.Transport, cfg *idem.Config, register func(*idem.Engine)) *idem.Engine {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e, err := idem.NewEngine(st, tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	register(e)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return e
}

func envelope(t *testing.T, e *idem.Engine, id string, msg any, traceparent string) idem.Envelope {
	t.Helper()
	env, err := e.NewEnvelope(id, msg)
	if err != nil {
		t.Fatal(err)
	}
	if traceparent != "" {
		env.Headers = map[string]string{transport.HeaderTraceParent: traceparent}
	}
	return env
}

// The span tree of one message: the message span is the child of its
// creation context (the producer's span, which the envelope names), links
// to it and to its unit of work; the command it emits has a send span, a
// child of the message span, and the command's own message span is the
// send span's child; a duplicate adds a duplicate span and no second
// applied one.
func TestSpanTree(t *testing.T) {
	s := newSetup(t)
	st := memstore.New(nil)
	t.Cleanup(func() { st.Close() })
	tr := memtransport.New(nil)
	t.Cleanup(func() { tr.Close() })
	var shipped atomic.Int32
	var shipCtx trace.SpanContext
	var mu sync.Mutex
	e := startEngine(t, st, tr, &idem.Config{Tracer: s.tracer}, func(e *idem.Engine) {
		if err := e.Register(orderMachine()); err != nil {
			t.Fatal(err)
		}
		if err := e.Handle(shipType, func(ctx context.Context, env idem.Envelope) error {
			mu.Lock()
			shipCtx = trace.SpanContextFromContext(ctx)
			mu.Unlock()
			shipped.Add(1)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})

	prod, tp := s.producer(t)
	env := envelope(t, e, "placed-1", Placed{Order: "o-1"}, tp)
	ctx := context.Background()
	if err := e.Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the shipment", func() bool { return shipped.Load() == 1 })
	if err := e.Publish(ctx, env); err != nil { // the producer retries
		t.Fatal(err)
	}
	waitFor(t, "the duplicate", func() bool { return e.Stats().Duplicates == 1 })
	if err := e.Stop(ctx); err != nil { // every span has ended
		t.Fatal(err)
	}

	placedType := saga.MessageType(Placed{})
	applied := s.spans("idem.message "+placedType, otelidem.AttrOutcome.String(idem.OutcomeApplied))
	if len(applied) != 1 {
		t.Fatalf("got %d applied spans for %s, want 1", len(applied), placedType)
	}
	msg := applied[0]
	if got := msg.SpanKind(); got != trace.SpanKindConsumer {
		t.Errorf("message span kind: got %v, want consumer", got)
	}
	for k, want := range map[attribute.Key]string{
		otelidem.AttrSagaType: "order", otelidem.AttrSagaKey: "o-1", otelidem.AttrDedupID: "placed-1",
		otelidem.AttrFrom: string(saga.Initial), otelidem.AttrTo: "Placed",
	} {
		if got := attr(msg, k).AsString(); got != want {
			t.Errorf("message span %s: got %q, want %q", k, got, want)
		}
	}
	if msg.Parent().SpanID() != prod.SpanID() || msg.SpanContext().TraceID() != prod.TraceID() {
		t.Errorf("message span: parent %s in trace %s, want the producer's span %s in trace %s", msg.Parent().SpanID(), msg.SpanContext().TraceID(), prod.SpanID(), prod.TraceID())
	}
	links := linksByKind(msg)
	if l := links["producer"]; l.SpanID() != prod.SpanID() {
		t.Errorf("message span links: got %+v, want a producer link to %s", msg.Links(), prod.SpanID())
	}

	// It links to the unit of work holding it.
	var uow sdktrace.ReadOnlySpan
	for _, sp := range s.spans("idem.unit_of_work") {
		if sp.SpanContext().SpanID() == links["unit_of_work"].SpanID() {
			uow = sp
		}
	}
	if uow == nil {
		t.Fatalf("the message span links to no unit-of-work span: %+v", msg.Links())
	}

	// Publish kept the producer's creation context: each of its two send
	// spans is a producer span that links to it.
	send := s.spans("idem.send " + placedType)
	if len(send) != 2 {
		t.Fatalf("got %d send spans of %s, want 2 (two publishes)", len(send), placedType)
	}
	for _, sp := range send {
		if sp.SpanKind() != trace.SpanKindProducer || linksByKind(sp)["producer"].SpanID() != prod.SpanID() {
			t.Errorf("send span of %s: kind %v, links %+v, want a producer span linked to the creation context %s the envelope carries", placedType, sp.SpanKind(), sp.Links(), prod.SpanID())
		}
	}
	if got := attr(uow, otelidem.AttrUoWOutcome).AsString(); got != idem.UnitCommitted {
		t.Errorf("unit of work outcome: got %q, want %q", got, idem.UnitCommitted)
	}
	if got := attr(uow, otelidem.AttrUoWAttempts).AsInt64(); got != 1 {
		t.Errorf("unit of work attempts: got %d, want 1", got)
	}

	// The duplicate: a span of its own, with outcome duplicate.
	if dups := s.spans("idem.message "+placedType, otelidem.AttrOutcome.String(idem.OutcomeDuplicate)); len(dups) != 1 {
		t.Errorf("got %d duplicate spans, want 1", len(dups))
	}

	// The command the transition sent has a send span, the message span's
	// child, whose context it carries: its own span is the send span's
	// child, and the handler ran inside it.
	shipSend := s.spans("idem.send " + shipType)
	if len(shipSend) != 1 || shipSend[0].Parent().SpanID() != msg.SpanContext().SpanID() {
		t.Fatalf("send spans of %s: got %d, want 1, the child of the %s span %s", shipType, len(shipSend), placedType, msg.SpanContext().SpanID())
	}
	for k, want := range map[attribute.Key]string{otelidem.AttrSagaType: "order", otelidem.AttrSagaKey: "o-1", "messaging.operation.name": "send"} {
		if got := attr(shipSend[0], k).AsString(); got != want {
			t.Errorf("send span of %s: %s %q, want %q", shipType, k, got, want)
		}
	}
	ship := s.spans("idem.message "+shipType, otelidem.AttrOutcome.String(idem.OutcomeApplied))
	if len(ship) != 1 {
		t.Fatalf("got %d applied spans for %s, want 1", len(ship), shipType)
	}
	if got, want := ship[0].Parent().SpanID(), shipSend[0].SpanContext().SpanID(); got != want {
		t.Errorf("%s span: parent %s, want its send span %s", shipType, got, want)
	}
	if got := ship[0].SpanContext().TraceID(); got != prod.TraceID() {
		t.Errorf("%s span: trace %s, want the producer's %s", shipType, got, prod.TraceID())
	}
	mu.Lock()
	defer mu.Unlock()
	if shipCtx.SpanID() != ship[0].SpanContext().SpanID() {
		t.Errorf("the handler's context holds span %s, want its message span %s", shipCtx.SpanID(), ship[0].SpanContext().SpanID())
	}
}

// conflictOnce is a store whose first commit loses an optimistic-
// concurrency race.
type conflictOnce struct {
	store.Store
	done atomic.Bool
}

func (c *conflictOnce) Begin(ctx context.Context) (store.UnitOfWork, error) {
	u, err := c.Store.Begin(ctx)
	return &conflictUoW{UnitOfWork: u, c: c}, err
}

type conflictUoW struct {
	store.UnitOfWork
	c *conflictOnce
}

func (u *conflictUoW) Commit(ctx context.Context, ch *store.Changes) error {
	if u.c.done.CompareAndSwap(false, true) {
		return fmt.Errorf("test: %w", store.ErrConflict)
	}
	return u.UnitOfWork.Commit(ctx, ch)
}

// An attempt rolled back by a conflict ends its message span with outcome
// conflict, and the send span of its emission with error.type conflict:
// the message has one applied span, from the attempt that committed, and
// the unit of work counts two attempts.
func TestConflictLeavesNoAppliedSpan(t *testing.T) {
	s := newSetup(t)
	mem := memstore.New(nil)
	t.Cleanup(func() { mem.Close() })
	st := &conflictOnce{Store: mem}
	tr := memtransport.New(nil)
	t.Cleanup(func() { tr.Close() })
	e := startEngine(t, st, tr, &idem.Config{Tracer: s.tracer}, func(e *idem.Engine) {
		if err := e.Register(orderMachine()); err != nil {
			t.Fatal(err)
		}
		if err := e.Handle(shipType, func(context.Context, idem.Envelope) error { return nil }); err != nil {
			t.Fatal(err)
		}
	})
	ctx := context.Background()
	if err := e.Publish(ctx, envelope(t, e, "placed-1", Placed{Order: "o-1"}, "")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two applied messages", func() bool { return e.Stats().Applied == 2 })
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	placedType := saga.MessageType(Placed{})
	all := s.spans("idem.message " + placedType)
	var outcomes []string
	for _, sp := range all {
		outcomes = append(outcomes, attr(sp, otelidem.AttrOutcome).AsString())
	}
	if len(all) != 2 || outcomes[0] != idem.OutcomeConflict || outcomes[1] != idem.OutcomeApplied {
		t.Fatalf("message span outcomes: got %v, want [conflict applied]", outcomes)
	}
	uows := s.spans("idem.unit_of_work", otelidem.AttrSagaType.String("order"))
	if len(uows) != 1 {
		t.Fatalf("got %d unit-of-work spans of the order saga, want 1", len(uows))
	}
	if got := attr(uows[0], otelidem.AttrUoWAttempts).AsInt64(); got != 2 {
		t.Errorf("attempts: got %d, want 2", got)
	}
	if got := attr(uows[0], otelidem.AttrUoWConflicts).AsInt64(); got != 1 {
		t.Errorf("conflicts: got %d, want 1", got)
	}
	if got := e.TypeStats()["order"].Conflicts; got != 1 {
		t.Errorf("TypeStats conflicts of order: got %d, want 1", got)
	}
	// Both attempts continue the trace of the Publish's send span, and
	// link to the unit of work.
	send := s.spans("idem.send " + placedType)
	if len(send) != 1 {
		t.Fatalf("got %d send spans of %s, want 1", len(send), placedType)
	}
	for _, sp := range all {
		if sp.Parent().SpanID() != send[0].SpanContext().SpanID() {
			t.Errorf("message span %s: parent %s, want the send span %s", sp.SpanContext().SpanID(), sp.Parent().SpanID(), send[0].SpanContext().SpanID())
		}
		if got := linksByKind(sp)["unit_of_work"]; got.SpanID() != uows[0].SpanContext().SpanID() {
			t.Errorf("message span %s: links %+v, want one to the unit of work %s", sp.SpanContext().SpanID(), sp.Links(), uows[0].SpanContext().SpanID())
		}
	}
	var errTypes []string
	for _, sp := range s.spans("idem.send " + shipType) {
		errTypes = append(errTypes, attr(sp, "error.type").AsString())
	}
	if len(errTypes) != 2 || errTypes[0] != "conflict" || errTypes[1] != "" {
		t.Errorf("error.type of the send spans of %s: got %q, want [conflict \"\"]", shipType, errTypes)
	}
}

// linksByKind returns the span's links by their idem.link attribute.
func linksByKind(sp sdktrace.ReadOnlySpan) map[string]trace.SpanContext {
	out := map[string]trace.SpanContext{}
	for _, l := range sp.Links() {
		out[attrOf(l.Attributes, otelidem.AttrLink)] = l.SpanContext
	}
	return out
}

// splitTransport receives from one transport and publishes to another: it
// links engine A, which consumes from memory, to engine B, which consumes
// from a SQLite queue, so that the emitted message crosses a real queue's
// serialisation.
type splitTransport struct {
	transport.Consumer
	pub transport.Publisher
}

func (s splitTransport) Publish(ctx context.Context, msgs []transport.Envelope) error {
	return s.pub.Publish(ctx, msgs)
}

func (s splitTransport) Close() error { return nil }

// Across two engines linked by a SQLite queue, the downstream message span
// continues the upstream trace: it is the child of the send span of the
// upstream message's emission, and links to it.
func TestPropagationAcrossEngines(t *testing.T) {
	s := newSetup(t)
	ctx := context.Background()
	queue, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "b.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { queue.Close() })
	in := memtransport.New(nil)
	t.Cleanup(func() { in.Close() })
	memA := memstore.New(nil)
	t.Cleanup(func() { memA.Close() })

	a := startEngine(t, memA, splitTransport{Consumer: in, pub: queue}, &idem.Config{Tracer: s.tracer}, func(e *idem.Engine) {
		if err := e.Register(orderMachine()); err != nil {
			t.Fatal(err)
		}
	})
	var shipped atomic.Int32
	startEngine(t, queue, queue, &idem.Config{Tracer: s.tracer}, func(e *idem.Engine) {
		if err := e.Handle(shipType, func(context.Context, idem.Envelope) error { shipped.Add(1); return nil }); err != nil {
			t.Fatal(err)
		}
	})

	prod, tp := s.producer(t)
	if err := in.Publish(ctx, []transport.Envelope{envelope(t, a, "placed-1", Placed{Order: "o-1"}, tp)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the shipment in engine B", func() bool { return shipped.Load() == 1 })
	waitFor(t, "engine B's message span", func() bool { return len(s.spans("idem.message "+shipType)) == 1 })

	up := s.spans("idem.message "+saga.MessageType(Placed{}), otelidem.AttrOutcome.String(idem.OutcomeApplied))
	if len(up) != 1 {
		t.Fatalf("got %d upstream applied spans, want 1", len(up))
	}
	if got := up[0].SpanContext().TraceID(); got != prod.TraceID() {
		t.Errorf("upstream span: trace %s, want the producer's trace %s", got, prod.TraceID())
	}
	send := s.spans("idem.send " + shipType)
	if len(send) != 1 || send[0].Parent().SpanID() != up[0].SpanContext().SpanID() {
		t.Fatalf("got %d send spans of %s, want 1, the child of the upstream message span", len(send), shipType)
	}
	if got := attr(send[0], "messaging.system").AsString(); got != "idem" {
		t.Errorf("send span on a transport that does not describe itself: messaging.system %q, want idem", got)
	}
	down := s.spans("idem.message " + shipType)[0]
	if got, want := down.SpanContext().TraceID(), prod.TraceID(); got != want {
		t.Errorf("downstream span: trace %s, want the producer's trace %s", got, want)
	}
	if got, want := down.Parent().SpanID(), send[0].SpanContext().SpanID(); got != want || !down.Parent().IsRemote() {
		t.Errorf("downstream span: parent %s (remote %v), want the send span %s, parsed from the envelope", got, down.Parent().IsRemote(), want)
	}
	if got := linksByKind(down)["producer"]; got.SpanID() != send[0].SpanContext().SpanID() {
		t.Errorf("downstream span links: got %+v, want a producer link to the send span %s", down.Links(), send[0].SpanContext().SpanID())
	}
	if got := attr(down, "messaging.system").AsString(); got != "sqlite" {
		t.Errorf("downstream span: messaging.system %q, want sqlite", got)
	}
}

// While a message is traced, the engine's log lines about it carry the
// message span's trace_id and span_id.
func TestLogLinesCarryTheSpan(t *testing.T) {
	s := newSetup(t)
	var buf syncBuffer
	logger := slog.New(otelidem.NewLogHandler(slog.NewJSONHandler(&buf, nil)))
	st := memstore.New(nil)
	t.Cleanup(func() { st.Close() })
	tr := memtransport.New(nil)
	t.Cleanup(func() { tr.Close() })
	var calls atomic.Int32
	e := startEngine(t, st, tr, &idem.Config{Tracer: s.tracer, Logger: logger, RetryBase: time.Millisecond, RetryMax: time.Millisecond}, func(e *idem.Engine) {
		if err := e.Handle(shipType, func(context.Context, idem.Envelope) error {
			if calls.Add(1) == 1 {
				return errors.New("service unavailable")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	ctx := context.Background()
	if err := e.Publish(ctx, envelope(t, e, "ship-1", Ship{Order: "o-1"}, "")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retried handler", func() bool { return e.Stats().Applied == 1 })
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	retried := s.spans("idem.message "+shipType, otelidem.AttrOutcome.String(idem.OutcomeRetried))
	if len(retried) != 1 {
		t.Fatalf("got %d retried spans, want 1", len(retried))
	}
	var line map[string]any
	for _, l := range bytes.Split(buf.Bytes(), []byte("\n")) {
		if bytes.Contains(l, []byte("will retry")) {
			if err := json.Unmarshal(l, &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line == nil {
		t.Fatalf("no retry line in the log:\n%s", buf.Bytes())
	}
	sc := retried[0].SpanContext()
	if line[otelidem.LogTraceID] != sc.TraceID().String() || line[otelidem.LogSpanID] != sc.SpanID().String() {
		t.Errorf("retry line: got trace_id %v span_id %v, want %s %s", line[otelidem.LogTraceID], line[otelidem.LogSpanID], sc.TraceID(), sc.SpanID())
	}
}

func TestLogHandlerOutsideASpan(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(otelidem.NewLogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "x")
	logger.InfoContext(context.Background(), "hello")
	if bytes.Contains(buf.Bytes(), []byte(otelidem.LogTraceID)) {
		t.Errorf("a line outside a span got a trace_id: %s", buf.Bytes())
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"component":"x"`)) {
		t.Errorf("WithAttrs lost its attributes: %s", buf.Bytes())
	}
}

// syncBuffer is a bytes.Buffer safe for the engine's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// Background passes that did something are traced; idle ones are not.
func TestBackgroundSpans(t *testing.T) {
	s := newSetup(t)
	st := memstore.New(nil)
	t.Cleanup(func() { st.Close() })
	tr := memtransport.New(nil)
	t.Cleanup(func() { tr.Close() })
	e, err := idem.NewEngine(st, tr, &idem.Config{Tracer: s.tracer, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := e.RelayOutbox(ctx, 0); err != nil { // nothing to relay
		t.Fatal(err)
	}
	if n := len(s.spans("idem.background")); n != 0 {
		t.Fatalf("an idle relay pass recorded %d spans, want 0", n)
	}
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := uow.Commit(ctx, &store.Changes{Outbox: []store.OutboxMessage{
		{Envelope: idem.Envelope{ID: "m-1", Type: shipType, Body: []byte(`{}`)}, CreatedAt: now},
		{Envelope: idem.Envelope{ID: "m-2", Type: shipType, Body: []byte(`{}`)}, CreatedAt: now},
	}}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.RelayOutbox(ctx, 0); err != nil || n != 2 {
		t.Fatalf("relay: got %d, %v; want 2, nil", n, err)
	}
	got := s.spans("idem.background relay", otelidem.AttrTask.String(string(idem.TaskRelay)))
	if len(got) != 1 || attr(got[0], otelidem.AttrItems).AsInt64() != 2 {
		t.Fatalf("relay spans: got %d (items %v), want 1 with 2 items", len(got), got)
	}
}

// TestTraceParentFormat checks the traceparent that emissions carry against
// the SDK's own propagator.
func TestTraceParentFormat(t *testing.T) {
	s := newSetup(t)
	_, span := s.tracer.StartMessage(context.Background(), idem.MessageStart{Envelope: &idem.Envelope{ID: "x", Type: "t"}})
	tp := span.TraceParent()
	span.End(idem.MessageEnd{Outcome: idem.OutcomeApplied})
	ended := s.rec.Ended()
	sc := ended[len(ended)-1].SpanContext()
	want := fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
	if tp != want {
		t.Errorf("traceparent: got %q, want %q", tp, want)
	}
}

// failShip refuses to send Ship while fail is set: the engine then commits
// the command to its outbox but cannot send it, as when it crashes between
// the commit and the send; the outbox relay sends it later.
type failShip struct {
	*memtransport.Transport
	fail    atomic.Bool
	refused atomic.Int32
}

func (f *failShip) Publish(ctx context.Context, msgs []transport.Envelope) error {
	if f.fail.Load() && len(msgs) > 0 && msgs[0].Type == shipType {
		f.refused.Add(1)
		return errors.New("test: the broker is unreachable")
	}
	return f.Transport.Publish(ctx, msgs)
}

// The outbox relay sends the trace context stored with the outbox row at
// transition time: the command's message span is the child of the send
// span started then, and the relay starts no send span of its own.
func TestRelaySendsTheStoredTraceContext(t *testing.T) {
	s := newSetup(t)
	st := memstore.New(nil)
	t.Cleanup(func() { st.Close() })
	tr := &failShip{Transport: memtransport.New(nil)}
	t.Cleanup(func() { tr.Close() })
	tr.fail.Store(true)
	var shipped atomic.Int32
	e := startEngine(t, st, tr, &idem.Config{Tracer: s.tracer, RelayInterval: time.Hour}, func(e *idem.Engine) {
		if err := e.Register(orderMachine()); err != nil {
			t.Fatal(err)
		}
		if err := e.Handle(shipType, func(context.Context, idem.Envelope) error { shipped.Add(1); return nil }); err != nil {
			t.Fatal(err)
		}
	})
	ctx := context.Background()
	if err := e.Publish(ctx, envelope(t, e, "placed-1", Placed{Order: "o-1"}, "")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refused send of the command", func() bool { return tr.refused.Load() == 1 })
	tr.fail.Store(false)
	if n, err := e.RelayOutbox(ctx, 0); err != nil || n != 1 {
		t.Fatalf("relay: got %d, %v; want 1, nil", n, err)
	}
	waitFor(t, "the relayed command", func() bool { return shipped.Load() == 1 })
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	send := s.spans("idem.send " + shipType)
	if len(send) != 1 {
		t.Fatalf("got %d send spans of %s, want 1, started at transition time", len(send), shipType)
	}
	ship := s.spans("idem.message "+shipType, otelidem.AttrOutcome.String(idem.OutcomeApplied))
	if len(ship) != 1 {
		t.Fatalf("got %d applied spans of %s, want 1", len(ship), shipType)
	}
	if got, want := ship[0].Parent().SpanID(), send[0].SpanContext().SpanID(); got != want {
		t.Errorf("relayed %s: parent %s, want the send span %s of its transition", shipType, got, want)
	}
	if got := len(s.spans("idem.background relay")); got != 1 {
		t.Errorf("got %d relay spans, want 1", got)
	}
}

// Publish continues the trace of its context: the send span is the
// caller's span's child, and the envelope carries the send span's context
// (written into a copy of the caller's headers, which stay as they were).
func TestPublishContinuesTheCallersTrace(t *testing.T) {
	s := newSetup(t)
	st := memstore.New(nil)
	t.Cleanup(func() { st.Close() })
	tr := memtransport.New(nil)
	t.Cleanup(func() { tr.Close() })
	got := make(chan idem.Envelope, 1)
	e := startEngine(t, st, tr, &idem.Config{Tracer: s.tracer}, func(e *idem.Engine) {
		if err := e.Handle(shipType, func(_ context.Context, env idem.Envelope) error { got <- env; return nil }); err != nil {
			t.Fatal(err)
		}
	})
	ctx, caller := s.tp.Tracer("test").Start(context.Background(), "caller")
	env := envelope(t, e, "ship-1", Ship{Order: "o-1"}, "")
	env.Headers = map[string]string{"x-app": "1"}
	if err := e.Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
	caller.End()
	delivered := <-got
	if len(env.Headers) != 1 {
		t.Errorf("Publish changed the caller's headers: %v", env.Headers)
	}
	send := s.spans("idem.send " + shipType)
	if len(send) != 1 {
		t.Fatalf("got %d send spans, want 1", len(send))
	}
	if got, want := send[0].Parent().SpanID(), caller.SpanContext().SpanID(); got != want {
		t.Errorf("send span: parent %s, want the caller's span %s", got, want)
	}
	sc := send[0].SpanContext()
	if want := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID()); delivered.Headers[transport.HeaderTraceParent] != want || delivered.Headers["x-app"] != "1" {
		t.Errorf("delivered headers %v, want x-app and traceparent %s", delivered.Headers, want)
	}
}

// failBeginOnce fails the next Begin once armed: the store becomes
// unreachable while a plain handler runs, outside any unit of work.
type failBeginOnce struct {
	store.Store
	armed atomic.Bool
}

func (f *failBeginOnce) Begin(ctx context.Context) (store.UnitOfWork, error) {
	if f.armed.CompareAndSwap(true, false) {
		return nil, errors.New("test: the database is unreachable")
	}
	return f.Store.Begin(ctx)
}

// A handler's message span ends, with outcome failed, when the unit of
// work that would record the handler's inbox row cannot begin.
func TestHandlerSpanEndsWhenTheUnitOfWorkCannotBegin(t *testing.T) {
	s := newSetup(t)
	mem := memstore.New(nil)
	t.Cleanup(func() { mem.Close() })
	st := &failBeginOnce{Store: mem}
	tr := memtransport.New(nil)
	t.Cleanup(func() { tr.Close() })
	var calls atomic.Int32
	e := startEngine(t, st, tr, &idem.Config{Tracer: s.tracer, RetryBase: time.Millisecond, RetryMax: time.Millisecond}, func(e *idem.Engine) {
		if err := e.Handle(shipType, func(context.Context, idem.Envelope) error {
			if calls.Add(1) == 1 {
				st.armed.Store(true)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	ctx := context.Background()
	if err := e.Publish(ctx, envelope(t, e, "ship-1", Ship{Order: "o-1"}, "")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the handler's second run, recorded", func() bool { return e.Stats().Applied == 1 })
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, sp := range s.spans("idem.message " + shipType) {
		outcomes = append(outcomes, attr(sp, otelidem.AttrOutcome).AsString())
	}
	if len(outcomes) != 2 || outcomes[0] != idem.OutcomeFailed || outcomes[1] != idem.OutcomeApplied {
		t.Errorf("ended message spans of %s: outcomes %q, want [failed applied]", shipType, outcomes)
	}
}

// Remind is the timer message of the reminder saga.
type Remind struct {
	Order string `json:"order"`
}

func reminderMachine() *saga.Machine[orderData] {
	m := saga.New[orderData]("reminder")
	waiting, done := m.State("Waiting"), m.Final("Done")
	placed := saga.NewEvent[Placed](m, func(p Placed) string { return p.Order })
	remind := saga.NewEvent[Remind](m, func(r Remind) string { return r.Order })
	m.Initially(saga.When(placed).Then(func(c *saga.Context[orderData], p Placed) error {
		c.Schedule("remind", time.Hour, Remind(p))
		return nil
	}).TransitionTo(waiting))
	m.During(waiting, saga.Ignore(placed), saga.When(remind).TransitionTo(done))
	return m
}

// A timer continues the trace of the message that scheduled it: when it
// fires, its message span is the child of the send span started when the
// saga scheduled it.
func TestTimerContinuesTheSchedulersTrace(t *testing.T) {
	s := newSetup(t)
	st := memstore.New(nil)
	t.Cleanup(func() { st.Close() })
	tr := memtransport.New(nil)
	t.Cleanup(func() { tr.Close() })
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := startEngine(t, st, tr, &idem.Config{Tracer: s.tracer, Clock: clock, TimerInterval: time.Hour}, func(e *idem.Engine) {
		if err := e.Register(reminderMachine()); err != nil {
			t.Fatal(err)
		}
	})
	ctx := context.Background()
	if err := e.Publish(ctx, envelope(t, e, "placed-1", Placed{Order: "o-1"}, "")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the scheduling transition", func() bool { return e.Stats().Applied == 1 })
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	if n, err := e.RunTimers(ctx); err != nil || n != 1 {
		t.Fatalf("RunTimers: got %d, %v; want 1, nil", n, err)
	}
	waitFor(t, "the timer's transition", func() bool { return e.Stats().Applied == 2 })
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	remindType := saga.MessageType(Remind{})
	send := s.spans("idem.send " + remindType)
	placed := s.spans("idem.message "+saga.MessageType(Placed{}), otelidem.AttrOutcome.String(idem.OutcomeApplied))
	fired := s.spans("idem.message "+remindType, otelidem.AttrOutcome.String(idem.OutcomeApplied))
	if len(send) != 1 || len(placed) != 1 || len(fired) != 1 {
		t.Fatalf("got %d send spans of the timer, %d applied Placed and %d applied timer spans, want 1 each", len(send), len(placed), len(fired))
	}
	if send[0].Parent().SpanID() != placed[0].SpanContext().SpanID() {
		t.Errorf("the timer's send span: parent %s, want the scheduling message span %s", send[0].Parent().SpanID(), placed[0].SpanContext().SpanID())
	}
	if fired[0].Parent().SpanID() != send[0].SpanContext().SpanID() || fired[0].SpanContext().TraceID() != placed[0].SpanContext().TraceID() {
		t.Errorf("the fired timer's span: parent %s in trace %s, want the send span %s in trace %s",
			fired[0].Parent().SpanID(), fired[0].SpanContext().TraceID(), send[0].SpanContext().SpanID(), placed[0].SpanContext().TraceID())
	}
}

package otelidem_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/otelidem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
	"github.com/idemhq/idem/transport/natsjs/natsembed"
)

// The second saga of the flow: a shipment per order, started by the Ship
// command that the order saga (on another engine) sends.
type shipData struct {
	Ships int `json:"ships"`
}

func shipmentMachine() *saga.Machine[shipData] {
	m := saga.New[shipData]("shipment")
	shipping := m.State("Shipping")
	ship := saga.NewEvent[Ship](m, func(s Ship) string { return s.Order })
	m.Initially(saga.When(ship).Then(func(c *saga.Context[shipData], _ Ship) error {
		c.Data.Ships++
		return nil
	}).TransitionTo(shipping))
	m.During(shipping, saga.Ignore(ship))
	return m
}

// flowNet is where the two engines of a flow run: engine A (the order
// saga, behind the admin API) on stA and trA, engine B (the shipment saga)
// on stB and trB. trA sends Ship where trB receives it.
type flowNet struct {
	stA, stB store.Store
	trA, trB transport.Transport
	// want are the messaging attributes of the process spans of each
	// engine, and of the send spans of engine A.
	wantA, wantB transport.Description
}

// One business flow is one trace: a client's HTTP POST /api/messages, the
// server span, the send span of the publish, the order saga's message
// span, the send span of the Ship it emits, and the shipment saga's
// message span on the other engine, each the child of the one before,
// over the PostgreSQL queue and over NATS JetStream.
func TestOneTraceFromHTTPToTheSecondSaga(t *testing.T) {
	t.Run("postgresql", func(t *testing.T) {
		t.Parallel()
		flowTrace(t, pgFlow(t))
	})
	t.Run("nats", func(t *testing.T) {
		t.Parallel()
		flowTrace(t, natsFlow(t))
	})
}

func flowTrace(t *testing.T, n flowNet) {
	s := newSetup(t)
	a := startEngine(t, n.stA, n.trA, &idem.Config{Tracer: s.tracer}, func(e *idem.Engine) {
		if err := e.Register(orderMachine()); err != nil {
			t.Fatal(err)
		}
	})
	startEngine(t, n.stB, n.trB, &idem.Config{Tracer: s.tracer}, func(e *idem.Engine) {
		if err := e.Register(shipmentMachine()); err != nil {
			t.Fatal(err)
		}
	})
	srv, err := admin.New(a, n.stA, &admin.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)

	// The client: a span of its own, propagated in the request's headers.
	ctx, client := s.tp.Tracer("test").Start(context.Background(), "client")
	placedType := saga.MessageType(Placed{})
	body := fmt.Sprintf(`{"id":"placed-1","type":%q,"body":{"order":"o-1"}}`, placedType)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/api/messages", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	client.End()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /api/messages: %d %s", resp.StatusCode, answer)
	}
	applied := otelidem.AttrOutcome.String(idem.OutcomeApplied)
	waitFor(t, "the shipment saga's applied message span", func() bool { return len(s.spans("idem.message "+shipType, applied)) == 1 })

	one := func(what string, spans []sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
		t.Helper()
		if len(spans) != 1 {
			t.Fatalf("got %d %s spans, want 1", len(spans), what)
		}
		return spans[0]
	}
	server := one("POST /api/messages", s.spans("POST /api/messages"))
	sendPlaced := one("send "+placedType, s.spans("idem.send "+placedType))
	processPlaced := one("applied "+placedType, s.spans("idem.message "+placedType, applied))
	sendShip := one("send "+shipType, s.spans("idem.send "+shipType))
	processShip := one("applied "+shipType, s.spans("idem.message "+shipType, applied))

	traceID := client.SpanContext().TraceID()
	chain := []struct {
		name   string
		span   sdktrace.ReadOnlySpan
		parent trace.SpanContext
		kind   trace.SpanKind
	}{
		{"server span", server, client.SpanContext(), trace.SpanKindServer},
		{"send span of " + placedType, sendPlaced, server.SpanContext(), trace.SpanKindProducer},
		{"order saga's message span", processPlaced, sendPlaced.SpanContext(), trace.SpanKindConsumer},
		{"send span of " + shipType, sendShip, processPlaced.SpanContext(), trace.SpanKindProducer},
		{"shipment saga's message span", processShip, sendShip.SpanContext(), trace.SpanKindConsumer},
	}
	for _, c := range chain {
		if got := c.span.SpanContext().TraceID(); got != traceID {
			t.Errorf("%s: trace %s, want the client's trace %s", c.name, got, traceID)
		}
		if got := c.span.Parent().SpanID(); got != c.parent.SpanID() {
			t.Errorf("%s: parent span %s, want %s", c.name, got, c.parent.SpanID())
		}
		if got := c.span.SpanKind(); got != c.kind {
			t.Errorf("%s: kind %v, want %v", c.name, got, c.kind)
		}
	}

	checkAttrs(t, "send span of "+shipType, sendShip, map[string]string{
		"messaging.system": n.wantA.System, "messaging.operation.name": "send", "messaging.operation.type": "send",
		"messaging.destination.name": n.wantA.Destination, "messaging.message.conversation_id": "o-1",
	})
	checkAttrs(t, "order saga's message span", processPlaced, map[string]string{
		"messaging.system": n.wantA.System, "messaging.operation.name": "process",
		"messaging.destination.name": n.wantA.Destination, "messaging.consumer.group.name": n.wantA.ConsumerGroup,
	})
	checkAttrs(t, "shipment saga's message span", processShip, map[string]string{
		"messaging.system": n.wantB.System, "messaging.operation.name": "process", "messaging.operation.type": "process",
		"messaging.destination.name": n.wantB.Destination, "messaging.consumer.group.name": n.wantB.ConsumerGroup,
		"messaging.message.conversation_id": "o-1",
	})

	// The shipment's unit of work holds the message span by a link, and
	// links to the message's creation context itself.
	var uowLink trace.SpanContext
	for _, l := range processShip.Links() {
		if attrOf(l.Attributes, otelidem.AttrLink) == "unit_of_work" {
			uowLink = l.SpanContext
		}
	}
	if !uowLink.IsValid() {
		t.Fatalf("the shipment's message span links to no unit of work: links %+v", processShip.Links())
	}
	var uow sdktrace.ReadOnlySpan
	waitFor(t, "the shipment's unit of work, which its message span links to", func() bool {
		for _, u := range s.spans("idem.unit_of_work", otelidem.AttrSagaType.String("shipment")) {
			if u.SpanContext().SpanID() == uowLink.SpanID() {
				uow = u
			}
		}
		return uow != nil
	})
	if got := attr(uow, "messaging.batch.message_count").AsInt64(); got < 1 {
		t.Errorf("unit of work: messaging.batch.message_count %d, want at least 1", got)
	}
	linked := false
	for _, l := range uow.Links() {
		linked = linked || l.SpanContext.SpanID() == sendShip.SpanContext().SpanID()
	}
	if !linked {
		t.Errorf("the shipment's unit of work does not link to the send span of %s: links %+v", shipType, uow.Links())
	}
}

func checkAttrs(t *testing.T, what string, sp sdktrace.ReadOnlySpan, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got := attr(sp, attribute.Key(k))
		if v == "" {
			if got.Type() != attribute.EMPTY {
				t.Errorf("%s: %s is %q, want none", what, k, got.String())
			}
			continue
		}
		if got.AsString() != v {
			t.Errorf("%s: %s is %q, want %q", what, k, got.String(), v)
		}
	}
}

func attrOf(kvs []attribute.KeyValue, k attribute.Key) string {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value.AsString()
		}
	}
	return ""
}

// routeTransport is engine A's transport on PostgreSQL: it receives from
// A's queue and sends Ship to B's queue, everything else to A's. It is
// not A's store, so engine A writes an outbox and sends after the commit.
type routeTransport struct{ a, b *pgstore.Store }

func (r routeTransport) Publish(ctx context.Context, msgs []transport.Envelope) error {
	var mine, theirs []transport.Envelope
	for _, m := range msgs {
		if m.Type == shipType {
			theirs = append(theirs, m)
		} else {
			mine = append(mine, m)
		}
	}
	if len(theirs) > 0 {
		if err := r.b.Publish(ctx, theirs); err != nil {
			return err
		}
	}
	if len(mine) > 0 {
		return r.a.Publish(ctx, mine)
	}
	return nil
}

func (r routeTransport) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	return r.a.Receive(ctx, max)
}
func (r routeTransport) Ack(ctx context.Context, ds []transport.Delivery) error {
	return r.a.Ack(ctx, ds)
}
func (r routeTransport) Nack(ctx context.Context, d transport.Delivery, delay time.Duration) error {
	return r.a.Nack(ctx, d, delay)
}
func (r routeTransport) Close() error                    { return nil }
func (r routeTransport) Describe() transport.Description { return r.a.Describe() }

func pgFlow(t *testing.T) flowNet {
	a, b := openPG(t), openPG(t)
	return flowNet{
		stA: a, trA: routeTransport{a: a, b: b},
		stB: b, trB: b,
		wantA: transport.Description{System: "postgresql", Destination: a.Schema() + ".idem_queue"},
		wantB: transport.Description{System: "postgresql", Destination: b.Schema() + ".idem_queue"},
	}
}

func randName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// openPG opens a store on a fresh schema of the tests' PostgreSQL, dropped
// when the test ends.
func openPG(t *testing.T) *pgstore.Store {
	t.Helper()
	url := testenv.PostgresURL(t)
	ctx := context.Background()
	schema := randName("t_")
	st, err := pgstore.Open(ctx, url, &pgstore.Config{Schema: schema, Migrate: true, MaxConns: 8})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		_ = st.Close()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return st
}

// natsFlow runs both engines on one stream of an embedded nats-server,
// each with a durable consumer of its own message type.
func natsFlow(t *testing.T) flowNet {
	ctx := context.Background()
	srv, err := natsembed.Start(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	stream := randName("FLOW_")
	open := func(consumer, typ string) *natsjs.Transport {
		tr, err := natsjs.Open(ctx, srv.URL(), &natsjs.Config{Stream: stream, Consumer: consumer, Types: []string{typ}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}
	trA := open("orders", saga.MessageType(Placed{}))
	trB := open("shipping", shipType)
	stA, stB := memstore.New(nil), memstore.New(nil)
	t.Cleanup(func() { stA.Close(); stB.Close() })
	return flowNet{
		stA: stA, trA: trA, stB: stB, trB: trB,
		wantA: transport.Description{System: "nats", Destination: stream, ConsumerGroup: "orders"},
		wantB: transport.Description{System: "nats", Destination: stream, ConsumerGroup: "shipping"},
	}
}

package otelidem_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/otelidem"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// An engine traced with OpenTelemetry. A real program passes no provider
// (the global one is used, set up with an OTLP exporter); this one records
// spans in memory to print them. The log handler adds trace_id and span_id
// to the engine's lines written inside a span.
func ExampleNewTracer() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	logger := slog.New(otelidem.NewLogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	st, tr := memstore.New(nil), memtransport.New(nil)
	defer st.Close()
	defer tr.Close()
	e, err := idem.NewEngine(st, tr, &idem.Config{
		Logger: logger,
		Tracer: otelidem.NewTracer(otelidem.WithTracerProvider(tp)),
	})
	if err != nil {
		panic(err)
	}
	if err := e.Register(orderMachine()); err != nil {
		panic(err)
	}
	done := make(chan struct{})
	if err := e.Handle(shipType, func(context.Context, idem.Envelope) error { close(done); return nil }); err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := e.Start(ctx); err != nil {
		panic(err)
	}
	env, err := e.NewEnvelope("placed-1", Placed{Order: "o-1"})
	if err != nil {
		panic(err)
	}
	if err := e.Publish(ctx, env); err != nil {
		panic(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		panic("no shipment")
	}
	if err := e.Stop(ctx); err != nil {
		panic(err)
	}
	for _, s := range rec.Ended() {
		if s.Name() == "idem.unit_of_work" {
			continue
		}
		for _, a := range s.Attributes() {
			if a.Key == otelidem.AttrOutcome {
				fmt.Println(s.Name(), a.Value.AsString())
			}
		}
	}
	// Output:
	// idem.message otelidem_test.Placed applied
	// idem.message otelidem_test.Ship applied
}

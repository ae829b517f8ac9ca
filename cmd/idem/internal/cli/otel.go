package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/otelidem"
)

// tracingEnabled reports whether the environment names an OTLP endpoint
// for traces: idem serve exports spans only then.
func tracingEnabled() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// setupTracing configures OpenTelemetry tracing from the standard OTEL_*
// environment variables (OTLP over HTTP; OTEL_SERVICE_NAME defaults to
// "idem"; OTEL_TRACES_SAMPLER and OTEL_RESOURCE_ATTRIBUTES apply) when an
// OTLP endpoint is set. It returns the engine's tracer, the log handler
// that adds trace_id and span_id to h's records, and a function that
// flushes and stops the exporter. Without an endpoint it returns a nil
// tracer, h itself and a no-op.
func setupTracing(ctx context.Context, h slog.Handler) (idem.Tracer, slog.Handler, func(context.Context) error, error) {
	if !tracingEnabled() {
		return nil, h, func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create the OTLP trace exporter (check OTEL_EXPORTER_OTLP_* variables): %w", err)
	}
	attrs := []resource.Option{resource.WithFromEnv(), resource.WithTelemetrySDK()}
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		attrs = append(attrs, resource.WithAttributes(attribute.String("service.name", "idem")))
	}
	res, err := resource.New(ctx, attrs...)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, nil, nil, fmt.Errorf("read OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return otelidem.NewTracer(otelidem.WithTracerProvider(tp)), otelidem.NewLogHandler(h), tp.Shutdown, nil
}

// benchTracer returns a tracer for idem bench --trace: every span sampled,
// batched as in production, and discarded by the exporter. stop flushes and
// stops it.
func benchTracer() (idem.Tracer, func()) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	return otelidem.NewTracer(otelidem.WithTracerProvider(tp)), func() { _ = tp.Shutdown(context.Background()) }
}

// discardExporter drops the spans it is given.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

package cli

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
)

func TestSetupTracingOff(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	h := slog.NewTextHandler(io.Discard, nil)
	tracer, got, stop, err := setupTracing(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	if tracer != nil || got != h {
		t.Errorf("without an OTLP endpoint: got tracer %v and handler %T, want nil and the handler unchanged", tracer, got)
	}
	if err := stop(context.Background()); err != nil {
		t.Error(err)
	}
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, spans reach the endpoint over
// OTLP/HTTP when the exporter is flushed.
func TestSetupTracingExports(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_SERVICE_NAME", "")
	ctx := context.Background()
	tracer, h, stop, err := setupTracing(ctx, slog.NewTextHandler(io.Discard, nil))
	if err != nil {
		t.Fatal(err)
	}
	if tracer == nil {
		t.Fatal("got no tracer with OTEL_EXPORTER_OTLP_ENDPOINT set")
	}
	if _, ok := h.(*slog.TextHandler); ok {
		t.Error("the log handler was not wrapped to add trace_id and span_id")
	}
	_, span := tracer.StartMessage(ctx, idem.MessageStart{Envelope: &idem.Envelope{ID: "m-1", Type: "t"}})
	span.End(idem.MessageEnd{Outcome: idem.OutcomeApplied})
	if err := stop(ctx); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Error("no OTLP export reached the endpoint")
	}
}

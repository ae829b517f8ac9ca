package admin

import (
	"net/http"

	"github.com/idemhq/idem"
)

// traceRequest starts the server span of a request to route when the
// engine's tracer traces requests (idem.RequestTracer), in the trace of the
// request's traceparent header. It returns the writer and the request to
// serve with (the request's context holds the span, so that what the
// handler publishes joins the trace) and the function that ends the span
// with the status written. Without such a tracer it returns w and r as
// they are.
func (a *api) traceRequest(w http.ResponseWriter, r *http.Request, route string) (http.ResponseWriter, *http.Request, func()) {
	rt, ok := a.e.Config().Tracer.(idem.RequestTracer)
	if !ok {
		return w, r, func() {}
	}
	ctx, span := rt.StartRequest(r.Context(), idem.RequestStart{Method: r.Method, Route: route, Header: r.Header})
	sw := &statusWriter{ResponseWriter: w}
	return sw, r.WithContext(ctx), func() { span.End(sw.code()) }
}

// statusWriter remembers the status code written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

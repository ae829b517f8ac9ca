package admin

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/engineaccess"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// MinTokenLen is the shortest admin token New accepts, in bytes: a
// shorter one could be guessed.
const MinTokenLen = 16

// DefaultMaxBodyBytes is the default limit of a request body: 1 MiB.
const DefaultMaxBodyBytes = 1 << 20

// Config configures a Server. The zero value (or a nil *Config) means the
// defaults given in each field's comment.
type Config struct {
	// Token, when set, is required as "Authorization: Bearer <token>" on
	// /metrics and every /api/ call, and compared in constant time. Empty
	// means no authentication: bind to a loopback address only. A token
	// is at least MinTokenLen bytes.
	Token string
	// MaxBodyBytes is the largest request body accepted, in bytes; a larger
	// one is answered with 413. Default DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// Registry receives the engine and store collectors and the Observer's
	// histograms, and is what /metrics serves. Nil means a new registry
	// with the Go runtime and process collectors.
	Registry *prometheus.Registry
	// Observer feeds idem_unit_of_work_seconds; set its Observe method as
	// idem.Config.Observe. Nil means an Observer nobody feeds: the
	// histogram stays empty.
	Observer *Observer
	// StoreTimeout bounds each store call of /readyz, /metrics and the API.
	// Default 5s.
	StoreTimeout time.Duration
	// Logger receives server-side errors. Nil means slog.Default().
	Logger *slog.Logger
	// ReadOnly hides every mutating control of the console and refuses
	// every mutating request of the console and the API with 403: replay,
	// purge, timer changes and message submission. Default false.
	ReadOnly bool
	// Transport, when it implements transport.PendingCounter, gives the
	// console's overview the queue depth. Nil means the store is asked
	// instead, when it is also the queue.
	Transport transport.Transport
	// SessionTTL is how long a console login lasts. Default 12h.
	SessionTTL time.Duration
}

// Server is the HTTP face of one engine. It implements http.Handler and is
// safe for concurrent use. It routes to three parts over one read model:
// the JSON API (api), the console's pages (console) and the metrics
// (collector, metrics.go).
type Server struct {
	*parts
	csrf    *http.CrossOriginProtection
	api     *api
	console *console
}

// New returns a Server for engine e, whose store is st. It fails when cfg
// has a negative limit or when Config.Registry already holds collectors of
// the same names.
func New(e *idem.Engine, st store.Store, cfg *Config) (*Server, error) {
	if e == nil || st == nil {
		return nil, errors.New("admin: New needs an engine and its store")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.MaxBodyBytes < 0 || c.StoreTimeout < 0 || c.SessionTTL < 0 {
		return nil, errors.New("admin: Config.MaxBodyBytes, Config.StoreTimeout and Config.SessionTTL must not be negative: use 0 for the default")
	}
	if c.Token != "" && len(c.Token) < MinTokenLen {
		return nil, fmt.Errorf("admin: the admin token (Config.Token; idem serve reads IDEM_ADMIN_TOKEN or --token-file) is %d bytes: use one of at least %d bytes, such as the output of `openssl rand -hex 16`", len(c.Token), MinTokenLen)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = NewObserver()
	}
	reg := c.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	p := &parts{
		e: e, st: st, caps: resolveCapabilities(st, engineaccess.Transport(e), c.Transport), log: c.Logger.With("component", "idem.admin"), mux: http.NewServeMux(),
		auth: c.Token != "", token: sha256.Sum256([]byte(c.Token)), maxBody: c.MaxBodyBytes, timeout: c.StoreTimeout,
		readOnly: c.ReadOnly, sessions: newSessions(c.SessionTTL), rates: newRateSampler(e), charts: newCharts(e, c.Observer),
	}
	s := &Server{parts: p, csrf: http.NewCrossOriginProtection(), api: &api{p}, console: &console{p}}
	for _, col := range []prometheus.Collector{newCollector(e, st, s.caps, s.log, c.StoreTimeout), c.Observer} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("admin: register metrics: %w", err)
		}
	}
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, ErrorLog: slogErrorLog{s.log}})

	s.routes(metrics)
	return s, nil
}

// ServeHTTP serves the routes listed in the package documentation.
// Cross-origin browser requests that change state are refused (CSRF), and
// without a token only loopback Host headers are served, so that a web page
// cannot reach the API through DNS rebinding.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	if !s.auth && !loopbackHost(r.Host) && r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
		writeError(w, http.StatusForbidden, "host %q is not a loopback address and no admin token is set: set IDEM_ADMIN_TOKEN to serve other hosts", r.Host)
		return
	}
	if err := s.csrf.Check(r); err != nil {
		writeError(w, http.StatusForbidden, "cross-origin request refused: call the admin API from a script or the command line, not from another site")
		return
	}
	s.mux.ServeHTTP(w, r.WithContext(store.WithReplayBy(r.Context(), replayActor(r))))
}

// loopbackHost reports whether a Host header names this machine.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "localhost" || host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	if _, _, err := s.st.OutboxBacklog(ctx); err != nil {
		s.log.WarnContext(ctx, "readyz: store not reachable", "error", err)
		writeError(w, http.StatusServiceUnavailable, "the store does not answer: see the server log for the cause, check that the database is up and reachable")
		return
	}
	err := s.e.Ready()
	if errors.Is(err, store.ErrReadOnly) {
		s.log.WarnContext(ctx, "readyz: the store refuses writes", "error", err)
		writeError(w, http.StatusServiceUnavailable, "the store refuses writes: its database server is no longer the primary (a failover); the store connects again to find the new one, see the server log")
		return
	}
	if err != nil {
		s.log.WarnContext(ctx, "readyz: the engine is not consuming", "error", err)
		writeError(w, http.StatusServiceUnavailable, "the engine is not running (not started, or stopped): see the server log, then restart the process")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// writeJSON writes v with the status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client went away; nothing to do
}

// errorBody is every error response.
type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, errorBody{Error: fmt.Sprintf(format, args...)})
}

// slogErrorLog adapts a logger to promhttp.Logger.
type slogErrorLog struct{ log *slog.Logger }

func (l slogErrorLog) Println(v ...any) { l.log.Warn("metrics: " + fmt.Sprint(v...)) }

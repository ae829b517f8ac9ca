package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/examples/searchimport"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/transport"
)

const (
	defaultServeAddr = "127.0.0.1:8080"
	serveStopTimeout = 10 * time.Second
)

type serveOptions struct {
	store        storeFlags
	transport    string
	dataDir      string
	natsReplicas int
	addr         string
	tokenFile    string
	maxBody      int64
	readOnly     bool
	// tlsCert and tlsKey serve HTTPS; insecureHTTP allows plain HTTP
	// beyond loopback (behind a TLS-terminating proxy).
	tlsCert, tlsKey string
	insecureHTTP    bool
}

func newServe() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the engine with the example sagas, the admin API, /metrics, /healthz and /readyz",
		Long: `Run the engine with the example sagas (searchimport and order) registered,
on the store given by --store or IDEM_STORE (default ` + defaultStore + `, a file in
the working directory, as for every command), which is also the queue unless --transport (or
IDEM_TRANSPORT) names a broker: nats://host:4222 for NATS JetStream,
` + transportEmbedded + ` for a JetStream server inside this process with its files
under --data-dir, amqp://user:pass@host:5672/vhost for RabbitMQ
(comma-separate the URLs of a cluster), or redis://user:pass@host:6379/0 for
Redis Streams. It serves over HTTP:

  GET /  the web console (see docs/console.md); a login form when a token is set
  GET /healthz, GET /readyz, GET /metrics (Prometheus)
  GET /api/sagas?type=&state=&after=&limit=, GET /api/sagas/{type}/{key}
  GET /api/dead-letters, GET /api/dead-letters/{id}
  POST /api/dead-letters/{id}/replay, DELETE /api/dead-letters/{id}
  POST /api/messages  {"id": "...", "type": "orders.OrderPlaced", "body": {...}}

The commands the example sagas send to services outside Idem
(orders.ShipOrder, searchimport.StartParsingReferenceFile) are logged by a
stand-in handler.

Security: --addr defaults to 127.0.0.1:8080. Any other address than a
loopback one needs an admin token, read from IDEM_ADMIN_TOKEN or from
--token-file (never from a flag value, which ps would show); /metrics and
/api/ then need "Authorization: Bearer <token>", and the console asks for the
token once and keeps an HttpOnly session cookie (Secure over TLS). Beyond
loopback the token and the cookie must not cross the network in clear:
serve HTTPS with --tls-cert and --tls-key, or put a TLS-terminating proxy
in front and pass --insecure-http (or let the proxy reach 127.0.0.1).
Wrong tokens are rate-limited (429 with Retry-After). --read-only hides and
refuses every mutating control.

A SQLite store is created or upgraded at start-up; a PostgreSQL schema only
with --migrate (or run idem migrate first). SIGTERM or an interrupt stops
the HTTP server, then lets the engine finish the batch in flight.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return runServe(ctx, &o, cmd.ErrOrStderr())
		},
	}
	o.store.register(cmd)
	cmd.Flags().StringVar(&o.transport, "transport", os.Getenv("IDEM_TRANSPORT"),
		"message transport: empty for the store's own queue, or "+brokerExamples(transportEmbedded)+" (comma-separate a cluster's URLs; default from IDEM_TRANSPORT)")
	cmd.Flags().IntVar(&o.natsReplicas, "nats-replicas", envInt("IDEM_NATS_REPLICAS", 1),
		"NATS only: replicas of the JetStream stream (3 on a three-node cluster): created so, and start-up is refused when the stream has fewer (default from IDEM_NATS_REPLICAS)")
	cmd.Flags().StringVar(&o.dataDir, "data-dir", "idem-data", "directory for an embedded broker's files (--transport "+transportEmbedded+")")
	o.listenFlags(cmd.Flags(), "")
	cmd.Flags().Int64Var(&o.maxBody, "max-body", admin.DefaultMaxBodyBytes, "largest admin API request body, in bytes")
	cmd.Flags().BoolVar(&o.readOnly, "read-only", false, "hide and refuse every mutating control of the console and the API (replay, purge, timers, message submission)")
	return cmd
}

// listenFlags registers --addr, --token-file, --tls-cert, --tls-key and
// --insecure-http, each description starting with when (as "with --serve:
// ") for a command that serves only on request.
func (o *serveOptions) listenFlags(f *pflag.FlagSet, when string) {
	f.StringVar(&o.addr, "addr", defaultServeAddr, when+"host:port to listen on; a non-loopback address needs IDEM_ADMIN_TOKEN or --token-file, and --tls-cert/--tls-key or --insecure-http")
	f.StringVar(&o.tokenFile, "token-file", "", when+"file holding the admin token (instead of IDEM_ADMIN_TOKEN)")
	f.StringVar(&o.tlsCert, "tls-cert", "", when+"serve HTTPS with this PEM certificate (chain) file; needs --tls-key")
	f.StringVar(&o.tlsKey, "tls-key", "", when+"the PEM private key of --tls-cert")
	f.BoolVar(&o.insecureHTTP, "insecure-http", false, when+"allow plain HTTP on a non-loopback --addr, which sends the admin token and session cookie in clear: only behind a TLS-terminating proxy or on a network you trust")
}

// listener is what the listening flags resolve to.
type listener struct {
	token string
	tls   *tls.Config // nil: plain HTTP
}

// checkListen validates the listening flags: --addr, the admin token it
// needs beyond loopback, and TLS. Its errors are usage errors naming the
// flags to pass.
func (o *serveOptions) checkListen() (*listener, error) {
	token, err := o.adminToken()
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(o.addr)
	if err != nil {
		return nil, usageErrorf("--addr %q is not host:port: pass --addr 127.0.0.1:8080, say", o.addr)
	}
	if !loopback(host) && token == "" {
		return nil, usageErrorf("--addr %s accepts connections from other machines, and no admin token is set: set IDEM_ADMIN_TOKEN (or pass --token-file), or listen on 127.0.0.1", o.addr)
	}
	tlsConf, err := o.tlsConfig(host)
	if err != nil {
		return nil, err
	}
	return &listener{token: token, tls: tlsConf}, nil
}

// adminToken reads the token from --token-file, else IDEM_ADMIN_TOKEN.
func (o *serveOptions) adminToken() (string, error) {
	if o.tokenFile == "" {
		return strings.TrimSpace(os.Getenv("IDEM_ADMIN_TOKEN")), nil
	}
	b, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return "", usageErrorf("read --token-file: %v: pass a readable file holding the token", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", usageErrorf("--token-file %s is empty: write the admin token into it", o.tokenFile)
	}
	return tok, nil
}

// tlsConfig loads --tls-cert and --tls-key (nil, nil without them), and
// refuses plain HTTP on a host other machines can reach unless
// --insecure-http says so: the admin token and the session cookie would
// cross the network in clear.
func (o *serveOptions) tlsConfig(host string) (*tls.Config, error) {
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return nil, usageErrorf("--tls-cert and --tls-key go together: pass both, the certificate (chain) and its private key as PEM files")
	}
	if o.tlsCert == "" {
		if !loopback(host) && !o.insecureHTTP {
			return nil, usageErrorf("--addr %s accepts connections from other machines over plain HTTP, which would send the admin token and the session cookie in clear: "+
				"pass --tls-cert and --tls-key to serve HTTPS, or put a TLS-terminating proxy in front and pass --insecure-http (or listen on 127.0.0.1 behind a proxy on this machine)", o.addr)
		}
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
	if err != nil {
		return nil, usageErrorf("load --tls-cert %s and --tls-key %s: %w: pass a PEM certificate and the PEM private key that matches it", o.tlsCert, o.tlsKey, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// loopback reports whether addr's host only accepts local connections.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// envInt reads an integer default from the environment: def when unset,
// -1 when not a number, so that the flag's own check refuses it.
func envInt(name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return v
}

func runServe(ctx context.Context, o *serveOptions, stderr io.Writer) error {
	l, err := o.checkListen()
	if err != nil {
		return err
	}
	token, tlsConf := l.token, l.tls
	if o.maxBody < 1 {
		return usageErrorf("--max-body %d is not positive: pass a size in bytes, 1048576 say", o.maxBody)
	}
	if err := o.store.resolve(); err != nil {
		return err
	}

	// Listen before opening the store: a port in use is found at once,
	// before any schema is touched.
	ln, err := net.Listen("tcp", o.addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return usageErrorf("address %s is in use: pass --addr with a free port, or stop the process that holds it", o.addr)
	}
	if err != nil {
		return usageErrorf("listen on %s: %v: pass --addr host:port with an address of this machine", o.addr, err)
	}
	defer ln.Close()

	// One slog logger for every line, the store's own (a migration) included.
	tracer, logHandler, stopTracing, err := setupTracing(ctx, slog.NewTextHandler(stderr, nil))
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	logger := slog.New(logHandler)
	defer func() { // flushes the spans of the last batch, after the engine stopped
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serveStopTimeout)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			logger.Warn("idem serve: flush traces", "error", err)
		}
	}()
	o.store.logger = logger
	sqlite := strings.HasPrefix(o.store.url, "sqlite:")
	st, _, err := o.store.open(ctx, sqlite) // its errors say what to do, with exit code 2
	if err != nil {
		return err
	}
	defer st.Close()

	var tr transport.Transport = st
	if o.transport != "" {
		if o.natsReplicas < 1 {
			return usageErrorf("--nats-replicas (or IDEM_NATS_REPLICAS) must be a positive number: pass 1, or 3 on a three-node JetStream cluster")
		}
		t, closeTr, err := openTransportWith(ctx, o.transport, o.dataDir, transportOptions{Replicas: o.natsReplicas, Logger: logger})
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		defer closeTr() // deferred after st.Close: runs first
		tr = t
	}

	obs := admin.NewObserver()
	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: logger, Observe: obs.Observe, Tracer: tracer, StopTimeout: serveStopTimeout})
	if err != nil {
		return err
	}
	if err := registerServe(e, logger); err != nil {
		return err
	}
	h, err := admin.New(e, st, &admin.Config{Token: token, MaxBodyBytes: o.maxBody, Observer: obs, Logger: logger, ReadOnly: o.readOnly, Transport: tr})
	if err != nil {
		return err
	}
	// The engine runs until engineCtx ends, not ctx: the HTTP server must
	// stop first, so that no message is accepted after the engine.
	engineCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEngine()
	ran := make(chan error, 1)
	go func() { ran <- e.Run(engineCtx) }()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	scheme := "http"
	if tlsConf != nil {
		scheme, srv.TLSConfig = "https", tlsConf
		go func() { served <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { served <- srv.Serve(ln) }()
	}
	logger.Info("idem serve: listening", "console", scheme+"://"+ln.Addr().String()+"/", "read_only", o.readOnly, "store", storeLabel(o.store.url), "transport", transportLabel(o.transport), "auth", token != "")

	var runErr error
	select {
	case <-ctx.Done():
		logger.Info("idem serve: stopping")
	case err := <-served:
		runErr = &exitError{code: 1, err: fmt.Errorf("http server: %w", err)}
	case err := <-ran:
		ran <- err // read again below
		runErr = &exitError{code: 1, err: fmt.Errorf("the engine stopped: %v", err)}
	}

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serveStopTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("idem serve: http shutdown", "error", err)
	}
	stopEngine()
	if err := <-ran; err != nil && runErr == nil {
		if errors.Is(err, context.DeadlineExceeded) {
			// The batch in flight was cancelled: its deliveries are handed out again.
			logger.Warn("idem serve: the engine did not stop in time; unfinished deliveries will be redelivered", "timeout", serveStopTimeout)
		} else {
			runErr = &exitError{code: 1, err: fmt.Errorf("stop the engine: %w", err)}
		}
	}
	return runErr
}

// storeLabel names a store for the log without its connection string.
func storeLabel(u string) string {
	if strings.HasPrefix(u, "sqlite:") {
		return u
	}
	scheme, _, _ := strings.Cut(u, ":")
	return scheme
}

// registerServe registers the example sagas and a stand-in for the
// services that receive their commands.
func registerServe(e *idem.Engine, logger *slog.Logger) error {
	for _, m := range exampleMachines() {
		if err := e.Register(m); err != nil {
			return err
		}
	}
	log := logger.With("component", "idem.serve")
	standIn := func(_ context.Context, env idem.Envelope) error {
		log.Info("command for a service outside idem serve (logged only)", "message_id", env.ID, "message_type", env.Type, "correlation_id", env.CorrelationID)
		return nil
	}
	for _, t := range serveHandled() {
		if err := e.Handle(t, standIn); err != nil {
			return err
		}
	}
	return nil
}

// serveHandled are the message types idem serve's stand-in handles: the
// commands its sagas send to services outside it.
func serveHandled() []string {
	return []string{saga.MessageType(orders.ShipOrder{}), saga.MessageType(searchimport.StartParsingReferenceFile{})}
}

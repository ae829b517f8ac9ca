// Package natsembed runs nats-server with JetStream inside the process, so
// that an Idem application on the NATS transport (package natsjs) can be a
// single binary. It is a package of its own because it compiles the whole
// of nats-server: a program that connects natsjs to an external server
// does not import it.
//
//	srv, err := natsembed.Start(ctx, filepath.Join(dataDir, "nats"), nil)
//	…
//	defer srv.Shutdown()
//	tr, err := natsjs.Open(ctx, srv.URL(), nil)
package natsembed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config configures an embedded server. The zero value (or a nil *Config)
// means every default.
type Config struct {
	// Host is the client listen address. Default "127.0.0.1"; listening on
	// another address exposes the broker without authentication.
	Host string
	// Port is the client port. Default: a free port chosen by the system
	// (Server.URL tells which). Give the port of a previous run to restart
	// a server where its clients reconnect.
	Port int
	// ServerName names the server. Default "idem-embedded".
	ServerName string
	// MaxPayload is the server's max_payload: the largest message, headers
	// included, that it accepts. Default DefaultMaxPayload (8 MiB), so
	// that the engine's default 1 MiB bodies fit (natsjs's
	// Transport.MaxMessageBytes); NATS advises against more than 8 MiB.
	MaxPayload int32
}

// DefaultMaxPayload is the default Config.MaxPayload. A stand-alone
// nats-server's default max_payload is 1 MiB.
const DefaultMaxPayload = 8 << 20

// Server is an in-process nats-server with JetStream. Create it with
// Start; stop it with Shutdown. Its methods are safe for concurrent use.
type Server struct {
	ns *server.Server
}

// Start starts nats-server in this process with JetStream file storage
// under dir (created if missing; the server keeps its files in
// dir/jetstream) and fsync of every write before it is acknowledged
// (SyncAlways, the sync_interval: always of a configuration file), and
// returns once it accepts connections or ctx is done. cfg may be nil.
// Connect to it with natsjs.Open(ctx, srv.URL(), …). It returns an error
// for an empty dir, a negative Config.MaxPayload, a port in use or a
// server that did not start JetStream.
func Start(ctx context.Context, dir string, cfg *Config) (*Server, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if dir == "" {
		return nil, errors.New("natsembed: the server needs a storage directory")
	}
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.Port == 0 {
		c.Port = server.RANDOM_PORT
	}
	if c.ServerName == "" {
		c.ServerName = "idem-embedded"
	}
	if c.MaxPayload < 0 {
		return nil, errors.New("natsembed: Config.MaxPayload must not be negative: use 0 for the default")
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("natsembed: server storage: %w", err)
	}
	opts := &server.Options{
		ServerName:             c.ServerName,
		Host:                   c.Host,
		Port:                   c.Port,
		JetStream:              true,
		StoreDir:               dir,
		SyncAlways:             true,
		MaxPayload:             c.MaxPayload,
		NoLog:                  true,
		NoSigs:                 true,
		DisableJetStreamBanner: true,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	ns.Start()
	wait := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	if !ns.ReadyForConnections(wait) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("natsembed: server on %s:%d not ready within %v (is the port in use?)", c.Host, c.Port, wait)
	}
	if !ns.JetStreamEnabled() {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("natsembed: server started without JetStream (storage directory %s)", dir)
	}
	if err := keepStreamsDir(ns); err != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, err
	}
	return &Server{ns: ns}, nil
}

// keepStreamsDir works around a race in nats-server (seen in 2.15):
// deleting a stream removes the account's streams directory, when empty,
// in a goroutine of its own, which can remove it while the next stream is
// being created in it; that creation then fails with "error creating store
// for stream" (mkdir …/streams/NAME: no such file or directory). A
// directory in it that no stream can be named after ('.' is not allowed in
// stream names) keeps it from ever being empty. When it recovers streams,
// nats-server passes over a directory without a stream metafile.
func keepStreamsDir(ns *server.Server) error {
	cfg := ns.JetStreamConfig()
	if cfg == nil {
		return nil
	}
	keep := filepath.Join(cfg.StoreDir, server.DEFAULT_GLOBAL_ACCOUNT, "streams", "idem.keep")
	if err := os.MkdirAll(keep, 0o750); err != nil {
		return fmt.Errorf("natsembed: server storage: %w", err)
	}
	return nil
}

// URL returns the client URL, for Open.
func (s *Server) URL() string { return s.ns.ClientURL() }

// Port returns the client port the server listens on.
func (s *Server) Port() int {
	if a, ok := s.ns.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// NATS returns the underlying server, for monitoring.
func (s *Server) NATS() *server.Server { return s.ns }

// Shutdown stops the server and waits until it has stopped; clients see
// the connection close and reconnect to the same port when a server comes
// back there. Shutdown is idempotent.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

package natsjs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedConfig configures an embedded server. The zero value means every
// default.
type EmbeddedConfig struct {
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
	// included, that it accepts. Default DefaultEmbeddedMaxPayload (8 MiB),
	// so that the engine's default 1 MiB bodies fit
	// (Transport.MaxMessageBytes); NATS advises against more than 8 MiB.
	MaxPayload int32
}

// DefaultEmbeddedMaxPayload is the default EmbeddedConfig.MaxPayload. A
// stand-alone nats-server's default max_payload is 1 MiB.
const DefaultEmbeddedMaxPayload = 8 << 20

// Server is an in-process nats-server with JetStream. Create it with
// Embedded; stop it with Shutdown.
type Server struct {
	ns *server.Server
}

// Embedded starts nats-server in this process with JetStream file storage
// under dir (created if missing; the server keeps its files in
// dir/jetstream) and fsync of every write before it is acknowledged
// (SyncAlways, the sync_interval: always of a configuration file), and
// returns once it accepts connections or ctx is done. cfg may be nil.
// Connect to it with Open(ctx, srv.URL(), …).
func Embedded(ctx context.Context, dir string, cfg *EmbeddedConfig) (*Server, error) {
	var c EmbeddedConfig
	if cfg != nil {
		c = *cfg
	}
	if dir == "" {
		return nil, errors.New("natsjs: embedded server needs a storage directory")
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
		return nil, errors.New("natsjs: EmbeddedConfig.MaxPayload must not be negative: use 0 for the default")
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = DefaultEmbeddedMaxPayload
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("natsjs: embedded server storage: %w", err)
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
		return nil, fmt.Errorf("natsjs: embedded server: %w", err)
	}
	ns.Start()
	wait := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	if !ns.ReadyForConnections(wait) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("natsjs: embedded server on %s:%d not ready within %v (is the port in use?)", c.Host, c.Port, wait)
	}
	if !ns.JetStreamEnabled() {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("natsjs: embedded server started without JetStream (storage directory %s)", dir)
	}
	return &Server{ns: ns}, nil
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

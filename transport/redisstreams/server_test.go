package redisstreams_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/internal/testenv"
)

// server is a private redis-server a test starts on a Unix socket, for
// settings or restarts that must not disturb the shared test server.
type server struct {
	bin, dir, sock string
	args           []string
	cmd            *exec.Cmd
}

// startServer starts redis-server (IDEM_TEST_REDIS_SERVER) with
// appendonly yes and appendfsync always, then args, and stops it when the
// test ends.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	bin := testenv.Server(t, "IDEM_TEST_REDIS_SERVER", "tests with a private Redis server", "/usr/bin/redis-server")
	// A short path: a Unix socket's path is limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "idem-redis-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s := &server{bin: bin, dir: dir, sock: filepath.Join(dir, "redis.sock")}
	s.args = append([]string{"--port", "0", "--unixsocket", s.sock, "--unixsocketperm", "700", "--dir", dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--logfile", filepath.Join(dir, "redis.log")}, args...)
	s.start(t)
	t.Cleanup(func() { s.crash(t) })
	return s
}

func (s *server) url() string { return "unix://" + s.sock }

// start runs the server and waits (polling, 30s deadline) until it answers
// PING with PONG.
func (s *server) start(t *testing.T) {
	t.Helper()
	s.cmd = exec.Command(s.bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: s.sock, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil || strings.HasPrefix(err.Error(), "NOAUTH") {
			return // up (and asking for a password)
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			t.Fatalf("redis-server did not answer PING within 30s: %v\n%s", err, log)
		}
		time.Sleep(20 * time.Millisecond) // polling for the server to come up, with a deadline
	}
}

// crash kills the server with SIGKILL and waits for it to exit.
func (s *server) crash(t *testing.T) {
	t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// client returns a client of the server, closed when the test ends.
func (s *server) client(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: s.sock})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

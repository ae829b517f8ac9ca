package torture

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/idemhq/idem/transport/natsjs/natsembed"
)

// embeddedNATS is the one nats-server a run with TransportEmbedded starts
// in the driver's process; publishers and workers connect to its URL.
type embeddedNATS struct {
	dir  string
	port int
	url  string

	mu  sync.Mutex
	srv *natsembed.Server
}

func startNATS(ctx context.Context, dir string) (*embeddedNATS, error) {
	srv, err := natsembed.Start(ctx, dir, nil)
	if err != nil {
		return nil, fmt.Errorf("start the embedded NATS server: %w", err)
	}
	return &embeddedNATS{dir: dir, port: srv.Port(), url: srv.URL(), srv: srv}, nil
}

// natsDown is how long a broker restart keeps the embedded server down:
// long enough for every client to see its connection fail.
const natsDown = 500 * time.Millisecond

// restart shuts the server down, waits natsDown, and starts it again on
// the same port and directory, where the clients reconnect.
func (n *embeddedNATS) restart(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv = nil
	}
	select {
	case <-time.After(natsDown): // the fault's duration, not a synchronisation
	case <-ctx.Done():
		return ctx.Err()
	}
	srv, err := natsembed.Start(ctx, n.dir, &natsembed.Config{Port: n.port})
	if err != nil {
		return fmt.Errorf("restart the embedded NATS server on port %d: %w", n.port, err)
	}
	n.srv = srv
	return nil
}

// stop shuts the server down; it is idempotent.
func (n *embeddedNATS) stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv = nil
	}
}

// restartTimeout bounds a restart command: a server that does not come
// back fails the run, naming the command, instead of hanging it.
var restartTimeout = 2 * time.Minute

// runRestartCmd runs a --pg-restart-cmd or --broker-restart-cmd in a
// process group of its own, and kills the whole group when it outlives
// restartTimeout (a server it started in the foreground would otherwise
// keep the output pipe open, and the wait with it).
func runRestartCmd(ctx context.Context, flag, command string) error {
	ctx, cancel := context.WithTimeout(ctx, restartTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, "sh", "-c", command)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = 5 * time.Second
	out, err := c.CombinedOutput()
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%s did not finish within %s, and was killed: %q; its output: %s", flag, restartTimeout, command, out)
	case err != nil:
		return fmt.Errorf("%s failed: %w: %s", flag, err, out)
	}
	return nil
}

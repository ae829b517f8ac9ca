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

// embeddedBroker is a broker the driver runs in its own process
// (TransportEmbedded, TransportCluster): publishers and workers connect to
// its URL, and the broker-restart fault restarts it.
type embeddedBroker interface {
	// URL is what publishers and workers connect to.
	URL() string
	// restart is the broker-restart fault; it returns once the broker
	// serves again.
	restart(ctx context.Context) error
	// stop shuts it down; it is idempotent.
	stop()
	// describe names it in the report.
	describe() string
}

// embeddedNATS is the one nats-server a run with TransportEmbedded starts
// in the driver's process.
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

// URL is the server's client URL.
func (n *embeddedNATS) URL() string { return n.url }

func (n *embeddedNATS) describe() string {
	return "nats-embedded (" + n.url + ", files in " + n.dir + ")"
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

// natsCluster is the three-node JetStream cluster a run with
// TransportCluster starts in the driver's process, with streams of three
// replicas. Its broker-restart fault kills a node, lets the others serve
// without it, and brings it back, twice: first the node that leads the
// run's stream (a leader election with publishes and acks in flight),
// then another one.
type natsCluster struct {
	dir, stream string
	c           *natsembed.Cluster
}

func startCluster(ctx context.Context, dir, stream string) (*natsCluster, error) {
	c, err := natsembed.StartCluster(ctx, dir, "torture")
	if err != nil {
		return nil, fmt.Errorf("start the embedded NATS cluster: %w", err)
	}
	return &natsCluster{dir: dir, stream: stream, c: c}, nil
}

func (n *natsCluster) URL() string { return n.c.URL() }

func (n *natsCluster) describe() string {
	return fmt.Sprintf("nats-cluster (%d nodes in this process, streams of %d replicas, %s, files in %s)", natsembed.ClusterSize, natsembed.ClusterSize, n.c.URL(), n.dir)
}

// nodeDown is how long the cluster fault keeps a node down: long enough
// for its clients to fail over and for the others to elect a leader.
const nodeDown = 2 * time.Second

func (n *natsCluster) restart(ctx context.Context) error {
	leader := n.c.StreamLeader(n.stream)
	if leader < 0 {
		leader = 0 // no leader now: kill any node
	}
	for _, node := range []int{leader, (leader + 1) % natsembed.ClusterSize} {
		n.c.Kill(node)
		select {
		case <-time.After(nodeDown): // the fault's duration, not a synchronisation
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := n.c.Restart(ctx, node); err != nil {
			return fmt.Errorf("restart cluster node %s: %w", n.c.NodeName(node), err)
		}
	}
	return nil
}

func (n *natsCluster) stop() { n.c.Shutdown() }

package natsembed

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster is a JetStream cluster of nats-servers in this process, each
// with its client and route ports on loopback and its files under a
// directory of its own, routed to every other: what a test or a torture
// run needs to kill a node, or the node that leads a stream, and bring it
// back on the same ports. Its methods are safe for concurrent use.
//
// A cluster in one process survives no crash of that process: it stands
// in for a cluster of machines only in tests (natsjs's cluster tests and
// idem torture --transport nats-cluster).
type Cluster struct {
	dir  string
	name string
	mu   sync.Mutex
	// clientPorts and routePorts are fixed at start, so that a restarted
	// node listens where its clients and peers reconnect.
	clientPorts, routePorts []int
	nodes                   []*server.Server // nil while a node is down
}

// ClusterSize is the node count of StartCluster's clusters: the smallest
// that keeps a quorum (2) with a node down.
const ClusterSize = 3

// StartCluster starts ClusterSize nodes named name-0 … name-2 in the
// cluster name, with JetStream files under dir/name-i and fsync before
// every acknowledgement, and returns once each accepts connections and
// the cluster elected a JetStream meta leader that counts every node as
// its peer, or ctx is done.
func StartCluster(ctx context.Context, dir, name string) (*Cluster, error) {
	if dir == "" || name == "" {
		return nil, errors.New("natsembed: a cluster needs a storage directory and a name")
	}
	c := &Cluster{dir: dir, name: name, nodes: make([]*server.Server, ClusterSize)}
	var err error
	for attempt := 1; ; attempt++ {
		if err = c.startOnFreePorts(ctx); err == nil || attempt == startAttempts || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if err := c.waitMetaLeader(ctx); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// startAttempts bounds the tries of StartCluster to start the nodes,
// each on ports drawn afresh: a port free when drawn may be taken by
// another process before its node binds it.
const startAttempts = 3

// nodeStartWait bounds the wait for a node starting for the first time:
// an embedded server starts in milliseconds, and one that cannot bind
// its port never becomes ready.
const nodeStartWait = 10 * time.Second

// startOnFreePorts draws the nodes' ports and starts every node, each
// within nodeStartWait; when one does not start, it stops those started.
func (c *Cluster) startOnFreePorts(ctx context.Context) error {
	c.clientPorts, c.routePorts = nil, nil
	for range ClusterSize {
		cp, err := freePort()
		if err != nil {
			return err
		}
		rp, err := freePort()
		if err != nil {
			return err
		}
		c.clientPorts, c.routePorts = append(c.clientPorts, cp), append(c.routePorts, rp)
	}
	for i := range ClusterSize {
		sctx, cancel := context.WithTimeout(ctx, nodeStartWait)
		err := c.Restart(sctx, i)
		cancel()
		if err != nil {
			c.Shutdown()
			return err
		}
	}
	return nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// below the range the system draws local ports from: a killed node comes
// back on its ports, and one in that range could meanwhile be taken as
// the local port of some outgoing connection.
func freePort() (int, error) {
	low := ephemeralLow()
	for range 100 {
		port := max(1024, low-10000) + rand.IntN(min(10000, low-1024))
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			l.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("natsembed: no free port on 127.0.0.1 below %d", low)
}

// ephemeralLow is the lowest port of the system's local port range
// (net.ipv4.ip_local_port_range), or Linux's default 32768.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil || low <= 2048 {
		return 32768
	}
	return low
}

// options are node i's server options.
func (c *Cluster) options(i int) *server.Options {
	var routes []*url.URL
	for j, p := range c.routePorts {
		if j != i {
			routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)})
		}
	}
	return &server.Options{
		ServerName:             c.NodeName(i),
		Host:                   "127.0.0.1",
		Port:                   c.clientPorts[i],
		Cluster:                server.ClusterOpts{Name: c.name, Host: "127.0.0.1", Port: c.routePorts[i]},
		Routes:                 routes,
		JetStream:              true,
		StoreDir:               filepath.Join(c.dir, c.NodeName(i)),
		SyncAlways:             true,
		MaxPayload:             DefaultMaxPayload,
		NoLog:                  true,
		NoSigs:                 true,
		DisableJetStreamBanner: true,
	}
}

// NodeName is node i's server name.
func (c *Cluster) NodeName(i int) string { return fmt.Sprintf("%s-%d", c.name, i) }

// URL returns the client URLs of every node, comma-separated, for
// natsjs.Open: the client connects to one and fails over to the others.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.clientPorts))
	for i, p := range c.clientPorts {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", p)
	}
	return strings.Join(urls, ",")
}

// Restart starts node i again on its ports, with its files (a no-op while
// it runs), and returns once it accepts connections.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[i] != nil {
		return nil
	}
	ns, err := server.NewServer(c.options(i))
	if err != nil {
		return fmt.Errorf("natsembed: node %s: %w", c.NodeName(i), err)
	}
	ns.Start()
	wait := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	if !ns.ReadyForConnections(wait) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return fmt.Errorf("natsembed: node %s on 127.0.0.1:%d not ready within %v (is the port in use?)", c.NodeName(i), c.clientPorts[i], wait)
	}
	if err := keepStreamsDir(ns); err != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		return err
	}
	c.nodes[i] = ns
	return nil
}

// Kill stops node i at once, as a crash of its machine would (its files
// stay, fsynced), and waits until it has stopped. It is a no-op while the
// node is down.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	ns := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	for i := range c.nodes {
		c.Kill(i)
	}
}

// StreamLeader returns the index of the node that leads stream, as a node
// that runs sees it, or -1 when none leads it now.
func (c *Cluster) StreamLeader(stream string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, ns := range c.nodes {
		if ns != nil && ns.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// waitMetaLeader waits until the cluster's JetStream meta leader counts
// every node as a peer online with JetStream: before that, a stream of
// ClusterSize replicas finds "no suitable peers for placement".
func (c *Cluster) waitMetaLeader(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		c.mu.Lock()
		for _, ns := range c.nodes {
			if ns != nil && ns.JetStreamIsLeader() && len(ns.JetStreamClusterPeers()) == ClusterSize {
				c.mu.Unlock()
				return nil
			}
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return fmt.Errorf("natsembed: cluster %s elected no JetStream meta leader: %w", c.name, ctx.Err())
		case <-t.C:
		}
	}
}

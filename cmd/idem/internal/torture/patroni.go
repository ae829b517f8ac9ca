package torture

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// patroni is a client of a Patroni cluster's REST APIs (the same calls
// patronictl makes): it reads the members and asks for a switchover.
type patroni struct {
	apis   []string // base URLs, http://host:port
	client *http.Client
}

// member is one node of GET /cluster.
type member struct {
	Name   string `json:"name"`
	Role   string `json:"role"` // leader, sync_standby, replica
	State  string `json:"state"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
	APIURL string `json:"api_url"` // http://host:port/patroni
	// Lag is a replica's replication lag in bytes, or "unknown".
	Lag any `json:"lag"`
}

// api is the member's REST API base URL.
func (m member) api() string { return strings.TrimSuffix(m.APIURL, "/patroni") }

func (m member) running() bool { return m.State == "running" || m.State == "streaming" }

// caughtUp reports whether m leads, or replicates within maxLag bytes
// (Patroni's maximum_lag_on_failover in scripts/pg-ha.sh): a standby
// further behind may not be promoted.
func (m member) caughtUp() bool {
	if m.Role == "leader" {
		return true
	}
	lag, ok := m.Lag.(float64)
	return ok && lag <= maxLag
}

// maxLag is the replication lag a healthy cluster's standbys stay within.
const maxLag = 1 << 20

// newPatroni parses Options.Patroni: comma-separated REST API URLs.
func newPatroni(spec string) (*patroni, error) {
	p := &patroni{client: &http.Client{Timeout: 500 * time.Millisecond}}
	for _, a := range strings.Split(spec, ",") {
		a = strings.TrimSuffix(strings.TrimSpace(a), "/")
		if !strings.HasPrefix(a, "http://") && !strings.HasPrefix(a, "https://") {
			return nil, fmt.Errorf("--patroni %q: want comma-separated Patroni REST API URLs, http://host:port (scripts/pg-ha.sh exports IDEM_TEST_PG_HA_PATRONI)", spec)
		}
		p.apis = append(p.apis, a)
	}
	return p, nil
}

// cluster returns the members, from the first API other than avoid (a
// node whose agent the fence froze) that answers.
func (p *patroni) cluster(ctx context.Context, avoid string) ([]member, error) {
	var errs []error
	for _, a := range p.apis {
		if a == avoid {
			continue
		}
		ms, err := p.get(ctx, a+"/cluster")
		if err == nil {
			return ms, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("read the Patroni cluster: %w", errors.Join(errs...))
}

func (p *patroni) get(ctx context.Context, url string) ([]member, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var c struct {
		Members []member `json:"members"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return c.Members, nil
}

// switchover asks leader's agent to hand over to a synchronous standby
// (patronictl switchover --force); Patroni answers once it is done.
func (p *patroni) switchover(ctx context.Context, leader member) error {
	body, _ := json.Marshal(map[string]string{"leader": leader.Name})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, leader.api()+"/switchover", bytes.NewReader(body))
	if err != nil {
		return err
	}
	// Patroni polls for the new leader before it answers.
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("switchover from %s: %w", leader.Name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("switchover from %s: %s: %s", leader.Name, resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

// leaderOf returns the running leader of ms.
func leaderOf(ms []member) (member, bool) {
	for _, m := range ms {
		if m.Role == "leader" && m.running() {
			return m, true
		}
	}
	return member{}, false
}

// healthy reports whether want members run, the standbys caught up, one
// of them the leader and one a synchronous standby: the cluster can fail
// over again.
func healthy(ms []member, want int) bool {
	var leader, sync, running int
	for _, m := range ms {
		if m.running() && m.caughtUp() {
			running++
		}
		switch m.Role {
		case "leader":
			leader++
		case "sync_standby":
			sync++
		}
	}
	return len(ms) == want && running == want && leader == 1 && sync >= 1
}

// listenerPID returns the process that listens on 127.0.0.1:port (a
// postmaster, a Patroni agent's REST API), from /proc: the driver runs
// on the cluster's host.
func listenerPID(port int) (int, error) {
	var inodes []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		inodes = append(inodes, listenInodes(string(b), port)...)
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("no process listens on port %d on this host (the failover fault runs beside the cluster)", port)
	}
	holders := map[int]bool{}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		l, err := os.Readlink(fd)
		if err != nil {
			continue
		}
		for _, in := range inodes {
			if l == "socket:["+in+"]" {
				pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
				holders[pid] = true
			}
		}
	}
	// A process forked by the listener may hold the socket too (a
	// detached one has another parent): the listener, which created it,
	// is the holder that started first.
	best, bestStart := 0, uint64(0)
	for pid := range holders {
		st := startTime(pid)
		if best == 0 || st < bestStart || st == bestStart && pid < best {
			best, bestStart = pid, st
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("no process found holding the socket that listens on port %d", port)
	}
	return best, nil
}

// listenInodes returns the inodes of the listening sockets on port in a
// /proc/net/tcp table.
func listenInodes(table string, port int) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(table))
	want := fmt.Sprintf(":%04X", port)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" || !strings.HasSuffix(f[1], want) {
			continue
		}
		out = append(out, f[9])
	}
	return out
}

// startTime is when pid started, in clock ticks since boot (field 22 of
// /proc/pid/stat); the maximum if unknown.
func startTime(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ^uint64(0)
	}
	// The command may hold spaces: the fields after its closing paren
	// start at field 3.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		return ^uint64(0)
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return ^uint64(0)
	}
	return st
}

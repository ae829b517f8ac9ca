package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The failover fault starts its first failover at a tenth of the run, one
// at a time, each 1 s after the previous one ended, rotating among the
// kinds in order; each is counted.
func TestFailoverSchedule(t *testing.T) {
	ctx := context.Background()
	var asked []string
	r := &driver{o: Options{Duration: 10 * time.Second, Faults: []string{FaultFailover}}, start: time.Now(), rng: rand.New(rand.NewPCG(1, 2)),
		rep: &Report{Faults: map[string]int{}}}
	r.ha = &haFaults{kinds: FailoverKinds, logf: func(string, ...any) {}, cause: func(_ context.Context, kind string) Failover {
		asked = append(asked, kind)
		return Failover{Kind: kind}
	}}
	s := &sender{r: r}
	f := r.plan()
	if want := r.start.Add(time.Second); !f.nextFailover.Equal(want) {
		t.Fatalf("first failover due at +%s, want +1s (a tenth of 10s)", f.nextFailover.Sub(r.start))
	}
	f.nextFailover = time.Now() // due
	for i := range 4 {
		if err := r.inject(ctx, f, s); err != nil {
			t.Fatal(err)
		}
		if !f.failingOver {
			t.Fatalf("failover %d not started once due", i+1)
		}
		fo := <-f.failedOver
		if f.fencing != (fo.Kind == FailoverFence) {
			t.Errorf("failover %d (%s): driver kills paused %v, want paused during a fence only", i+1, fo.Kind, f.fencing)
		}
		// A failover in progress: none other starts.
		if err := r.inject(ctx, f, s); err != nil {
			t.Fatal(err)
		}
		select {
		case extra := <-f.failedOver:
			t.Fatalf("a second failover (%s) started while one was in progress", extra.Kind)
		default:
		}
		ended := time.Now()
		r.failedOver(f, s, fo)
		if f.failingOver || f.nextFailover.Before(ended.Add(failoverGap)) {
			t.Fatalf("after failover %d: in progress %v, next due in %s; want none in progress and the next %s later", i+1, f.failingOver, time.Until(f.nextFailover), failoverGap)
		}
		// Not yet due: nothing starts.
		if err := r.inject(ctx, f, s); err != nil || f.failingOver {
			t.Fatalf("a failover started before it was due (%v)", err)
		}
		f.nextFailover = time.Now()
	}
	// Past its Duration, the run starts no more once every kind failed
	// over; before that, it goes on until each has.
	r.start = time.Now().Add(-time.Hour)
	if r.failoversDue(f) {
		t.Errorf("failovers due past the run's Duration after %d failovers of %d kinds", len(r.failovers), len(FailoverKinds))
	}
	if err := r.inject(ctx, f, s); err != nil || f.failingOver {
		t.Fatalf("a failover started past the run's Duration with every kind done (%v)", err)
	}
	r.failovers = r.failovers[:1]
	if !r.failoversDue(f) {
		t.Errorf("no failover due past the run's Duration with 2 kinds not yet failed over")
	}
	want := []string{FailoverKill, FailoverSwitchover, FailoverFence, FailoverKill}
	if strings.Join(asked, ",") != strings.Join(want, ",") {
		t.Errorf("kinds asked: got %v, want %v", asked, want)
	}
	if r.rep.Faults["failovers (kill)"] != 2 || r.rep.Faults["failovers (fence)"] != 1 {
		t.Errorf("fault counts: %v", r.rep.Faults)
	}
}

func TestDurationStats(t *testing.T) {
	ms := func(n ...int) []time.Duration {
		var out []time.Duration
		for _, x := range n {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		in   []time.Duration
		want string
	}{
		{nil, "none"},
		{ms(300), "min 300ms, median 300ms, max 300ms (1)"},
		{ms(900, 100, 500), "min 100ms, median 500ms, max 900ms (3)"},
		{ms(400, 100, 200, 900), "min 100ms, median 300ms, max 900ms (4)"},
	} {
		if got := statsOf(tc.in).String(); got != tc.want {
			t.Errorf("statsOf(%v): got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The report gives each kind's unavailability (fault to first commit)
// and its share after the promotion, and fails a run where no failover
// happened or one committed nothing on the new primary.
func TestFailoverSummary(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	fo := func(kind string, at, promoted, commit time.Duration) Failover {
		f := Failover{Kind: kind, From: "node1", To: "node2", At: t0.Add(at)}
		if promoted > 0 {
			f.Promoted = t0.Add(at + promoted)
		}
		if commit > 0 {
			f.FirstCommit = t0.Add(at + commit)
		}
		return f
	}
	s := &FailoverSummary{Start: t0, Failovers: []Failover{
		fo(FailoverKill, 3*time.Second, 2*time.Second, 3*time.Second),
		fo(FailoverSwitchover, 10*time.Second, time.Second, 1500*time.Millisecond),
		fo(FailoverKill, 20*time.Second, 2*time.Second, 5*time.Second),
	}}
	if p := s.problems(); len(p) != 0 {
		t.Fatalf("problems of a good run: %v", p)
	}
	kill, killAfter := s.Unavailability(FailoverKill)
	if kill.Min != 3*time.Second || kill.Median != 4*time.Second || kill.Max != 5*time.Second {
		t.Errorf("kill unavailability: got %s, want min 3s, median 4s, max 5s", kill)
	}
	if killAfter.Min != time.Second || killAfter.Max != 3*time.Second {
		t.Errorf("kill after promotion: got %s, want min 1s, max 3s", killAfter)
	}
	var b bytes.Buffer
	s.Print(&b)
	for _, want := range []string{
		"failovers: 3; unavailability = from the fault to the first commit on the new primary",
		"kill        min 3s, median 4s, max 5s (2); after the promotion min 1s, median 2s, max 3s (2)",
		"switchover  min 1.5s, median 1.5s, max 1.5s (1)",
		"all         min 1.5s, median 3s, max 5s (3)",
		"#2 switchover at 10s: node1 → node2, promoted +1s, first commit +1.5s",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}

	stalled := fo(FailoverFence, time.Second, 10*time.Second, 0)
	none := Failover{Kind: FailoverKill, From: "node1", At: t0, Problem: "no new leader 1m after the fault"}
	for _, tc := range []struct {
		fos  []Failover
		want []string
	}{
		{nil, []string{"no failover happened"}},
		{[]Failover{stalled}, []string{"failover 1 (fence of node1): nothing committed on the new primary node2"}},
		{[]Failover{none}, []string{"failover 1 (kill of node1): no new leader", "no failover happened"}},
	} {
		got := strings.Join((&FailoverSummary{Failovers: tc.fos}).problems(), "\n")
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("problems of %+v: got %q, want one naming %q", tc.fos, got, w)
			}
		}
	}
}

// The Patroni client reads the members from the first API that answers,
// skipping a frozen one, and asks the leader's agent to switch over.
func TestPatroniClient(t *testing.T) {
	members := []member{
		{Name: "node1", Role: "replica", State: "streaming", Host: "127.0.0.1", Port: 5433, Lag: 0},
		{Name: "node2", Role: "leader", State: "running", Host: "127.0.0.1", Port: 5434},
		{Name: "node3", Role: "sync_standby", State: "running", Host: "127.0.0.1", Port: 5435, Lag: 4096},
	}
	var switched map[string]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/cluster":
			_ = json.NewEncoder(w).Encode(map[string]any{"members": members})
		case r.Method == http.MethodPost && r.URL.Path == "/switchover":
			_ = json.NewDecoder(r.Body).Decode(&switched)
			if switched["leader"] != "node2" {
				http.Error(w, "Switchover could be performed only from a specific leader", http.StatusBadRequest)
				return
			}
			_, _ = io.WriteString(w, "Successfully switched over")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	dead := "http://127.0.0.1:1" // nothing listens
	p, err := newPatroni(dead + "," + srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ms, err := p.cluster(ctx, dead)
	if err != nil {
		t.Fatal(err)
	}
	l, ok := leaderOf(ms)
	if !ok || l.Name != "node2" || l.Port != 5434 {
		t.Fatalf("leader: got %+v %v, want node2 on 5434", l, ok)
	}
	if !healthy(ms, 3) || healthy(ms, 4) || healthy(ms[:2], 2) {
		t.Errorf("healthy: 3 running with a leader and a sync standby is; a missing member or sync standby is not")
	}
	for _, lag := range []any{"unknown", float64(maxLag + 1), nil} {
		behind := slices.Clone(ms)
		behind[2].Lag = lag
		if healthy(behind, 3) {
			t.Errorf("healthy with the sync standby's lag %v: a standby behind may not be promoted", lag)
		}
	}
	l.APIURL = srv.URL + "/patroni"
	if err := p.switchover(ctx, l); err != nil {
		t.Fatalf("switchover: %v", err)
	}
	l.Name = "node9"
	if err := p.switchover(ctx, l); err == nil || !strings.Contains(err.Error(), "400 Bad Request") {
		t.Errorf("a refused switchover: got %v, want the agent's refusal", err)
	}
	if _, err := p.cluster(ctx, srv.URL); err == nil {
		t.Errorf("only a dead API left: got no error")
	}
	if _, err := newPatroni("127.0.0.1:8008"); err == nil || !strings.Contains(err.Error(), "http://host:port") {
		t.Errorf("an API without a scheme: got %v, want a message saying what to give", err)
	}
}

// listenerPID finds the process that listens on a port: this one.
func TestListenerPID(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp: not Linux")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	pid, err := listenerPID(port)
	if err != nil || pid != os.Getpid() {
		t.Fatalf("listenerPID(%d): got %d %v, want this process %d", port, pid, err, os.Getpid())
	}
	// A child that inherited the socket holds it too (as a postmaster
	// Patroni starts may): the listener is still the one that started
	// first.
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	// Detached: its parent is no holder (a shell that exited).
	sh := exec.Command("sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!")
	sh.ExtraFiles = []*os.File{f}
	out, err := sh.Output()
	f.Close()
	if err != nil {
		t.Skipf("no sh to start a detached holder: %v", err)
	}
	child, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	defer func() { _ = syscall.Kill(child, syscall.SIGKILL) }()
	for range 10 { // map order varies
		if pid, err := listenerPID(port); err != nil || pid != os.Getpid() {
			t.Fatalf("listenerPID(%d) with a detached child %d holding the socket: got %d %v, want this process %d", port, child, pid, err, os.Getpid())
		}
	}
	_ = syscall.Kill(child, syscall.SIGKILL)
	ln.Close()
	if _, err := listenerPID(port); err == nil {
		t.Errorf("listenerPID of a closed port: got no error")
	}
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:E058 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:E058 0100007F:9C40 01 00000000:00000000 00:00000000 00000000   999        0 4343 1 0000000000000000 20 4 30 10 -1
`
	if got := listenInodes(table, 0xE058); len(got) != 1 || got[0] != "4242" {
		t.Errorf("listenInodes: got %v, want [4242] (the listening socket, not the connection)", got)
	}
}

// The failover fault needs a cluster: a Patroni cluster beside a SQLite
// store is refused; without one the fault is left out, like pg-restart
// without its command (the CLI refuses --faults failover without
// --patroni: TestTortureFailoverFlags).
func TestFailoverOptions(t *testing.T) {
	cmd := workerCommand
	for _, tc := range []struct {
		o    Options
		want error
	}{
		{Options{Store: "sqlite", Duration: time.Second, Command: cmd, Faults: []string{FaultFailover}, Patroni: "http://127.0.0.1:8008"}, ErrNoFailover},
		{Options{Store: "postgres://u@h/db", Duration: time.Second, Command: cmd, Faults: []string{FaultFailover}}, nil},
		{Options{Store: "sqlite", Duration: time.Second, Command: cmd}, nil},
	} {
		if err := tc.o.validate(); !errors.Is(err, tc.want) {
			t.Errorf("validate(%v, patroni %q): got %v, want %v", tc.o.Faults, tc.o.Patroni, err, tc.want)
		}
	}
	o := Options{Store: "postgres://u@h/db", Duration: time.Second, Command: cmd, Faults: []string{FaultFailover}, Patroni: "http://127.0.0.1:8008", FailoverKinds: []string{"unplug"}}
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "kill,switchover,fence") {
		t.Errorf("an unknown kind: got %v, want the known ones named", err)
	}
}

package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"time"
)

// fleet is the replicas of one phase: worker processes speaking the
// protocol of RunReplicaWorker.
type fleet struct {
	procs []*replicaProc
}

type replicaProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // the worker's stdout, closed at its end
}

// replicaStartTimeout bounds how long the replicas take to open their
// stores and say they are ready.
const replicaStartTimeout = 2 * time.Minute

// startFleet starts n replicas with args and waits until each is ready.
func (s *sweep) startFleet(ctx context.Context, n int, args []string) (*fleet, error) {
	f := &fleet{}
	for range n {
		p, err := s.startProc(args)
		if err != nil {
			f.kill()
			return nil, err
		}
		f.procs = append(f.procs, p)
	}
	deadline := time.NewTimer(replicaStartTimeout)
	defer deadline.Stop()
	for i, p := range f.procs {
		select {
		case line, ok := <-p.lines:
			if !ok || line != replicaReady {
				f.kill()
				return nil, fmt.Errorf("replica %d of %d did not start (it said %q; its errors are above)", i+1, n, line)
			}
		case <-deadline.C:
			f.kill()
			return nil, fmt.Errorf("replicas not ready after %s", replicaStartTimeout)
		case <-ctx.Done():
			f.kill()
			return nil, ctx.Err()
		}
	}
	return f, nil
}

func (s *sweep) startProc(args []string) (*replicaProc, error) {
	cmd := s.o.Command(args)
	cmd.Stderr = s.log
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a replica: %w", err)
	}
	p := &replicaProc{cmd: cmd, stdin: stdin, lines: make(chan string, 2)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 1<<16), 1<<30) // the final snapshot is one long line
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	return p, nil
}

// start tells every replica to start its engine.
func (f *fleet) start() error {
	for _, p := range f.procs {
		if _, err := io.WriteString(p.stdin, replicaGo+"\n"); err != nil {
			return fmt.Errorf("start a replica's engine: %w", err)
		}
	}
	return nil
}

// cpu is the replicas' processes' CPU time so far (0 for one whose
// /proc entry cannot be read).
func (f *fleet) cpu() time.Duration {
	var ticks int64
	for _, p := range f.procs {
		if st, err := readStat(p.cmd.Process.Pid); err == nil {
			ticks += st.utime + st.stime
		}
	}
	return time.Duration(ticks) * time.Second / clkTck
}

// stop ends every replica's input, which stops its engine, and returns
// their snapshots.
func (f *fleet) stop(ctx context.Context) ([]*replicaSnapshot, error) {
	for _, p := range f.procs {
		_ = p.stdin.Close()
	}
	var snaps []*replicaSnapshot
	var errs []error
	for i, p := range f.procs {
		var last string
		for line := range p.lines {
			last = line
		}
		werr := p.cmd.Wait()
		snap := &replicaSnapshot{}
		if err := json.Unmarshal([]byte(last), snap); err != nil {
			errs = append(errs, fmt.Errorf("replica %d: no report (%v; exit: %v)", i+1, err, werr))
			continue
		}
		snaps = append(snaps, snap)
	}
	f.procs = nil
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return snaps, errors.Join(errs...)
}

// kill ends the replicas that stop did not.
func (f *fleet) kill() {
	for _, p := range f.procs {
		_ = p.cmd.Process.Kill()
		_ = p.stdin.Close()
		for range p.lines {
		}
		_ = p.cmd.Wait()
	}
	f.procs = nil
}

// shareSettle is how long the sweep lets replicas that split the store's
// queue into shares (idem's shares.go refreshes them every second) settle
// once every replica has beaten: two refreshes.
const shareSettle = 2 * time.Second

// settle waits until the n replicas of p's schema have written their
// first heartbeat, then, when they split the queue into shares, for
// shareSettle: a fleet at work, not n processes all starting at once on
// a full queue, each before it knows of the others.
func (s *sweep) settle(ctx context.Context, p *phase, n int) error {
	ctx, cancel := context.WithTimeout(ctx, replicaStartTimeout)
	defer cancel()
	for {
		rs, err := p.st.Replicas(ctx, 1000)
		if err != nil {
			return fmt.Errorf("wait for the replicas' heartbeats: %w", err)
		}
		if len(rs) >= n {
			if rs[0].Config["queue_share"] != "" {
				return sleepCtx(ctx, shareSettle)
			}
			return nil
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("wait for the replicas' heartbeats (%d of %d): %w", len(rs), n, err)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

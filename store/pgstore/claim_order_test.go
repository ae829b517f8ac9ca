package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/pgstore"
)

// Consumers claiming inside their units of work keep each key's order, as
// the lease path does; consumers taking turns on one stream never claim.

// Step is the N-th message of its key. FailOnce fails its first try
// (transiently); Conflict makes its first try meet a concurrent writer.
type Step struct {
	Key      string `json:"key"`
	N        int    `json:"n"`
	FailOnce bool   `json:"fail_once"`
	Conflict bool   `json:"conflict"`
}

type stepData struct {
	Last int `json:"last"`
}

// stepLog records how each key's steps were applied.
type stepLog struct {
	mu         sync.Mutex
	tries      map[string]int
	violations []string
}

// stepMachine applies Steps, recording in lg any step applied out of its
// key's order. A Conflict step bumps its saga's version on another
// connection first, so its commit fails with a conflict.
func stepMachine(st *pgstore.Store, lg *stepLog) *saga.Machine[stepData] {
	m := saga.New[stepData]("steps")
	going := m.State("Going")
	step := saga.NewEvent[Step](m, func(s Step) string { return s.Key })
	apply := func(c *saga.Context[stepData], s Step) error {
		lg.mu.Lock()
		lg.tries[c.MessageID()]++
		first := lg.tries[c.MessageID()] == 1
		lg.mu.Unlock()
		if first && s.FailOnce {
			return errors.New("transient failure")
		}
		if first && s.Conflict {
			if _, err := st.Pool().Exec(context.Background(), `UPDATE idem_instances SET version = version + 1 WHERE saga_type = 'steps' AND key = $1`, s.Key); err != nil {
				return err
			}
		}
		if s.N != c.Data.Last+1 {
			lg.mu.Lock()
			lg.violations = append(lg.violations, fmt.Sprintf("%s: step %d applied after step %d", s.Key, s.N, c.Data.Last))
			lg.mu.Unlock()
		}
		c.Data.Last = s.N
		return nil
	}
	m.Initially(saga.When(step).Then(apply).TransitionTo(going))
	m.During(going, saga.When(step).Then(apply))
	return m
}

// TestClaimKeepsKeyOrder: four partitioned consumers, each claiming a
// backlog of its partition inside its units of work, with messages that
// fail once and commits that conflict: every key's steps apply in order,
// once. A failing step is its key's last, so the order the lease path
// keeps is total here: a claimed batch rolled back whole (its failing
// message returned with the others, or after a conflict) would let a
// later batch apply those others' successors first.
func TestClaimKeepsKeyOrder(t *testing.T) {
	st := openStore(t, pgstore.Config{Lease: 5 * time.Second})
	c := &claimCounter{Store: st}
	lg := &stepLog{tries: map[string]int{}}
	e, err := idem.NewEngine(c, c, &idem.Config{BatchSize: 8, Lanes: 4, Consumers: 4, PartitionedReceive: true,
		RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(stepMachine(st, lg)); err != nil {
		t.Fatal(err)
	}
	// Every fourth key has half the steps, its last failing once: its
	// batch holds other keys' middle steps, whose successors are in the
	// next batches (12 keys, batches of 8: consecutive batches share
	// keys).
	const keys, perKey = 12, 40
	steps := func(k int) int {
		if k%4 == 1 {
			return perKey / 2
		}
		return perKey
	}
	total := 0
	var envs []idem.Envelope
	for n := 1; n <= perKey; n++ {
		for k := range keys {
			if n > steps(k) {
				continue
			}
			total++
			s := Step{Key: fmt.Sprintf("k%02d", k), N: n, FailOnce: n == steps(k) && k%4 == 1, Conflict: k%6 == 2 && n%10 == 5}
			env, err := e.NewEnvelope(fmt.Sprintf("%s-%d", s.Key, n), s)
			if err != nil {
				t.Fatal(err)
			}
			envs = append(envs, env)
		}
	}
	if err := e.Publish(context.Background(), envs...); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	conn := schemaConn(t, st.Schema())
	enginetest.WaitSettled(t, enginetest.Rows(conn), 60*time.Second)
	stopEngine(t, e)

	lg.mu.Lock()
	defer lg.mu.Unlock()
	for _, v := range lg.violations {
		t.Error(v)
	}
	var applied, distinct int
	if err := conn.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT message_id) FROM idem_journal WHERE saga_type = 'steps'`).Scan(&applied, &distinct); err != nil {
		t.Fatal(err)
	}
	if applied != total || distinct != total {
		t.Errorf("journal: %d transitions of %d messages, want %d of each (every step once)", applied, distinct, total)
	}
	s := e.Stats()
	if c.claimed.Load() == 0 || c.returned.Load() == 0 || c.leased.Load() == 0 || s.Conflicts == 0 {
		t.Errorf("claimed %d, returned %d and leased %d inside units of work, %d conflicts: want each above zero (the test must reach every path)",
			c.claimed.Load(), c.returned.Load(), c.leased.Load(), s.Conflicts)
	}
	t.Logf("claimed %d, returned %d, leased %d; stats %+v", c.claimed.Load(), c.returned.Load(), c.leased.Load(), s)
}

// TestTurnsHotKeysFinish: four consumers taking turns on one stream (the
// zero Config's shape) on a few hot keys, every batch waiting for the one
// before it, with a pool of Lanes + 3 (the engine's need,
// pgstore.DefaultMaxConns): the backlog drains in key order, and no batch
// is claimed inside a unit of work (consumers in turn lease).
func TestTurnsHotKeysFinish(t *testing.T) {
	for _, lanes := range []int{4, 2} {
		t.Run(fmt.Sprintf("lanes %d", lanes), func(t *testing.T) {
			t.Parallel()
			hotKeys(t, lanes)
		})
	}
}

func hotKeys(t *testing.T, lanes int) {
	st := openStore(t, pgstore.Config{Lease: 5 * time.Second, MaxConns: int32(lanes) + 3})
	c := &claimCounter{Store: st}
	lg := &stepLog{tries: map[string]int{}}
	e, err := idem.NewEngine(c, c, &idem.Config{BatchSize: 4, Lanes: lanes, Consumers: 4,
		RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(stepMachine(st, lg)); err != nil {
		t.Fatal(err)
	}
	const keys, perKey = 3, 100
	var envs []idem.Envelope
	for n := 1; n <= perKey; n++ {
		for k := range keys {
			s := Step{Key: fmt.Sprintf("h%d", k), N: n, FailOnce: n == perKey}
			env, err := e.NewEnvelope(fmt.Sprintf("%s-%d", s.Key, n), s)
			if err != nil {
				t.Fatal(err)
			}
			envs = append(envs, env)
		}
	}
	if err := e.Publish(context.Background(), envs...); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	conn := schemaConn(t, st.Schema())
	enginetest.WaitSettled(t, enginetest.Rows(conn), 120*time.Second)
	stopEngine(t, e)
	lg.mu.Lock()
	defer lg.mu.Unlock()
	for _, v := range lg.violations {
		t.Error(v)
	}
	if n := c.claimed.Load(); n != 0 {
		t.Errorf("%d deliveries claimed inside units of work by consumers taking turns; want none (they lease)", n)
	}
	if s := e.Stats(); s.Applied != keys*perKey {
		t.Errorf("applied %d, want %d", s.Applied, keys*perKey)
	}
}

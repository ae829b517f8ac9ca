package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// The engine claiming a backlog inside its units of work
// (store.ClaimUnitOfWork): when, and that exactly-once holds there too.

// claimCounter is st as store and queue, counting the deliveries the
// engine claims inside units of work. Every statement is pgstore's.
type claimCounter struct {
	*pgstore.Store
	claimed, returned, leased atomic.Int64
}

func (c *claimCounter) Begin(ctx context.Context) (store.UnitOfWork, error) {
	u, err := c.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &countingUnit{ClaimUnitOfWork: u.(store.ClaimUnitOfWork), c: c}, nil
}

type countingUnit struct {
	store.ClaimUnitOfWork
	c *claimCounter
}

func (u *countingUnit) Return(ctx context.Context, d transport.Delivery, delay time.Duration) error {
	u.c.returned.Add(1)
	return u.ClaimUnitOfWork.Return(ctx, d, delay)
}

func (u *countingUnit) Lease(ctx context.Context) ([]transport.Delivery, error) {
	ds, err := u.ClaimUnitOfWork.Lease(ctx)
	u.c.leased.Add(int64(len(ds)))
	return ds, err
}

func (u *countingUnit) Claim(ctx context.Context, n, part, parts int) ([]transport.Delivery, error) {
	ds, err := u.ClaimUnitOfWork.Claim(ctx, n, part, parts)
	u.c.claimed.Add(int64(len(ds)))
	return ds, err
}

// divertAdded stores the counter saga's events in idem_emitted instead of
// the queue, as if another service consumed them from its own queue, for
// engines without a consumer of them (enginetest.NewSagaEngine).
func divertAdded(t testing.TB, st *pgstore.Store) {
	t.Helper()
	_, err := st.Pool().Exec(context.Background(), `
CREATE TABLE idem_emitted (LIKE idem_queue INCLUDING ALL);
CREATE RULE idem_divert_added AS ON INSERT TO idem_queue
  WHERE NEW.envelope->>'type' = '`+saga.MessageType(enginetest.Added{})+`'
  DO INSTEAD INSERT INTO idem_emitted (id, envelope, body, visible_at)
  VALUES (NEW.id, NEW.envelope, NEW.body, NEW.visible_at)`)
	if err != nil {
		t.Fatal(err)
	}
}

// checkEmitted checks that each increment emitted its event once.
func checkEmitted(t *testing.T, q enginetest.QueryRow, events int) {
	t.Helper()
	var n, distinct int
	if err := q(`SELECT count(*), count(DISTINCT id) FROM idem_emitted`, &n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != events || distinct != events {
		t.Errorf("emitted events: %d rows, %d distinct IDs; want %d of each (one per increment)", n, distinct, events)
	}
}

// A backlog is claimed inside units of work exactly when the whole batch
// is one unit of work nothing outside the transaction depends on: one lane
// per batch, no plain handler, and consumers that take turns no more than
// the lanes. Either way every increment applies once.
func TestEngineClaimsInsideUnitsOfWorkOnlyWhenItCan(t *testing.T) {
	testenv.PostgresURL(t)
	for _, tc := range []struct {
		name                 string
		lanes, consumers     int
		partitioned, handler bool
		claims               bool
	}{
		{"one consumer, one lane", 1, 1, false, false, true},
		{"partitioned consumers, a lane each", 2, 2, true, false, true},
		{"one consumer, two lanes", 2, 1, false, false, false},
		{"consumers sharing one stream", 2, 2, false, false, false},
		{"consumers sharing one stream, fewer lanes", 1, 2, false, false, false},
		{"a plain handler", 1, 1, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := openStore(t, pgstore.Config{Lease: 5 * time.Second})
			c := &claimCounter{Store: st}
			cfg := &idem.Config{BatchSize: 16, Lanes: tc.lanes, Consumers: tc.consumers, PartitionedReceive: tc.partitioned}
			var e *idem.Engine
			if tc.handler {
				e = enginetest.NewEngine(t, c, c, cfg)
			} else {
				divertAdded(t, st)
				e = enginetest.NewSagaEngine(t, c, c, cfg)
			}
			const keys, perKey = 30, 6
			want := enginetest.Workload(t, []*idem.Engine{e}, keys, perKey, 2)
			if err := e.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			conn := schemaConn(t, st.Schema())
			enginetest.WaitSettled(t, enginetest.Rows(conn), 60*time.Second)
			stopEngine(t, e)
			if tc.handler {
				enginetest.CheckExactlyOnce(t, st, enginetest.Rows(conn), want, perKey)
			} else {
				enginetest.CheckSagasExactlyOnce(t, st, enginetest.Rows(conn), want, perKey)
				checkEmitted(t, enginetest.Rows(conn), keys*perKey)
			}
			switch n := c.claimed.Load(); {
			case tc.claims && n == 0:
				t.Errorf("no delivery was claimed inside a unit of work; want the backlog of %d claimed that way", 2*keys*perKey)
			case !tc.claims && n > 0:
				t.Errorf("%d deliveries claimed inside units of work; want none (the batch is not one unit of work alone)", n)
			}
			t.Logf("claimed inside units of work: %d; stats %+v", c.claimed.Load(), e.Stats())
		})
	}
}

func stopEngine(t *testing.T, e *idem.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// Poke is the flaky saga's message; Fail makes its transition fail with a
// transient error.
type Poke struct {
	Key  string `json:"key"`
	Fail bool   `json:"fail"`
}

// flakyMachine starts a saga per Poke, failing the Pokes marked Fail and
// counting in tries how often each key's transition ran.
func flakyMachine(tries map[string]*atomic.Int64) *saga.Machine[struct{}] {
	m := saga.New[struct{}]("flaky")
	done := m.State("Done")
	poke := saga.NewEvent[Poke](m, func(p Poke) string { return p.Key })
	m.Initially(saga.When(poke).Then(func(_ *saga.Context[struct{}], p Poke) error {
		tries[p.Key].Add(1)
		if p.Fail {
			return errors.New("transient failure")
		}
		return nil
	}).TransitionTo(done))
	return m
}

// A claimed batch holding a message that fails commits the others and
// returns the failing one in the same commit, its attempt counted: it is
// dead-lettered after Config.MaxAttempts, and the others of its batch
// apply once.
func TestEngineClaimedBatchWithAFailureGoesThroughLeases(t *testing.T) {
	t.Parallel()
	st := openStore(t, pgstore.Config{Lease: 5 * time.Second})
	c := &claimCounter{Store: st}
	const n, failing, maxAttempts = 64, 24, 3
	tries := map[string]*atomic.Int64{}
	for i := range n {
		tries[fmt.Sprintf("p-%02d", i)] = new(atomic.Int64)
	}
	tr := &spanCounter{}
	e, err := idem.NewEngine(c, c, &idem.Config{BatchSize: 16, Lanes: 1, Consumers: 1, MaxAttempts: maxAttempts,
		RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond, Logger: discard, Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(flakyMachine(tries)); err != nil {
		t.Fatal(err)
	}
	// The first batch is received with a lease (the consumer has seen no
	// backlog yet); the failing message sits in the second, claimed one.
	var envs []idem.Envelope
	for i := range n {
		env, err := e.NewEnvelope(fmt.Sprintf("poke-%02d", i), Poke{Key: fmt.Sprintf("p-%02d", i), Fail: i == failing})
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
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

	if c.claimed.Load() == 0 || c.returned.Load() == 0 {
		t.Fatalf("%d deliveries claimed and %d returned inside units of work: the test did not reach the claim path", c.claimed.Load(), c.returned.Load())
	}
	bad := fmt.Sprintf("p-%02d", failing)
	dl, err := st.GetDeadLetter(context.Background(), fmt.Sprintf("poke-%02d", failing))
	if err != nil {
		t.Fatalf("dead letter of the failing message: %v", err)
	}
	if dl.Reason != idem.ReasonRetriesExhausted || dl.Attempts != maxAttempts {
		t.Errorf("dead letter: reason %s after %d attempts, want %s after %d (a claim returned is an attempt)",
			dl.Reason, dl.Attempts, idem.ReasonRetriesExhausted, maxAttempts)
	}
	if got := tries[bad].Load(); got < maxAttempts {
		t.Errorf("the failing transition ran %d times, want at least %d", got, maxAttempts)
	}
	var applied int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM idem_journal WHERE saga_type = 'flaky'`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if applied != n-1 {
		t.Errorf("journal: %d transitions, want %d (every message but the failing one, once)", applied, n-1)
	}
	if s := e.Stats(); s.Applied != n-1 || s.DeadLettered != 1 {
		t.Errorf("stats: applied %d, dead-lettered %d; want %d and 1", s.Applied, s.DeadLettered, n-1)
	}
	// Every span ended once; no unit of work failed.
	tr.check(t)
}

// spanCounter is a Tracer that counts spans started and ended, and the
// unit-of-work outcomes.
type spanCounter struct {
	uowStarted, uowEnded, msgStarted, msgEnded, twice atomic.Int64
	failedUnits, retriedMessages                      atomic.Int64
}

type counted struct {
	c    *spanCounter
	done atomic.Bool
}

func (c *spanCounter) StartUnitOfWork(ctx context.Context, _ idem.UnitOfWorkStart) (context.Context, idem.UnitOfWorkSpan) {
	c.uowStarted.Add(1)
	return ctx, &uowSpan{counted{c: c}}
}

func (c *spanCounter) StartMessage(ctx context.Context, _ idem.MessageStart) (context.Context, idem.MessageSpan) {
	c.msgStarted.Add(1)
	return ctx, &msgSpan{counted{c: c}}
}

func (c *spanCounter) StartBackground(ctx context.Context, _ idem.BackgroundTask) (context.Context, idem.BackgroundSpan) {
	return ctx, bgSpan{}
}

type uowSpan struct{ counted }

func (s *uowSpan) End(end idem.UnitOfWorkEnd) {
	if s.done.Swap(true) {
		s.c.twice.Add(1)
	}
	s.c.uowEnded.Add(1)
	if end.Outcome == idem.UnitFailed {
		s.c.failedUnits.Add(1)
	}
}

type msgSpan struct{ counted }

func (s *msgSpan) TraceParent() string { return "" }
func (s *msgSpan) End(end idem.MessageEnd) {
	if s.done.Swap(true) {
		s.c.twice.Add(1)
	}
	s.c.msgEnded.Add(1)
	if end.Outcome == idem.OutcomeRetried {
		s.c.retriedMessages.Add(1)
	}
}

type bgSpan struct{}

func (bgSpan) End(idem.BackgroundEnd) {}

func (c *spanCounter) check(t *testing.T) {
	t.Helper()
	if c.twice.Load() != 0 || c.uowStarted.Load() != c.uowEnded.Load() || c.msgStarted.Load() != c.msgEnded.Load() {
		t.Errorf("spans: %d units of work started, %d ended; %d messages started, %d ended; %d ended twice; want every span ended once",
			c.uowStarted.Load(), c.uowEnded.Load(), c.msgStarted.Load(), c.msgEnded.Load(), c.twice.Load())
	}
	if c.failedUnits.Load() != 0 || c.retriedMessages.Load() == 0 {
		t.Errorf("spans: %d units of work ended failed, %d messages retried; want none failed (a claimed batch commits what applied) and the failing message's retries", c.failedUnits.Load(), c.retriedMessages.Load())
	}
}

// Worker processes claiming inside their units of work, one killed with
// SIGKILL mid-run (its open transaction, claim included, is rolled back)
// and restarted: every increment applies once, checked from the database.
func TestSagaWorkersClaimingInsideUnitsOfWorkSurviveSIGKILL(t *testing.T) {
	url := testenv.PostgresURL(t)
	st := openStore(t, pgstore.Config{})
	divertAdded(t, st)
	conn := schemaConn(t, st.Schema())
	q := enginetest.Rows(conn)
	enginetest.SurviveSIGKILLOn(t, enginetest.KillRun{
		Store: st, Producer: enginetest.NewSagaEngine(t, st, st, nil), Query: q,
		Env: []string{sagaWorkerEnv + "=" + st.Schema(), "IDEM_TEST_PG_URL=" + url},
		Check: func(t *testing.T, st store.Store, q enginetest.QueryRow, want map[string]int, perKey int) {
			enginetest.CheckSagasExactlyOnce(t, st, q, want, perKey)
			checkEmitted(t, q, len(want)*perKey)
		},
	})
}

// sagaWorkerEnv routes a test binary to runSagaWorker.
const sagaWorkerEnv = "IDEM_PG_SAGA_WORKER_SCHEMA"

func runSagaWorker() int {
	return enginetest.RunSagaWorker(func(ctx context.Context) (store.Queue, error) {
		return pgstore.Open(ctx, os.Getenv("IDEM_TEST_PG_URL"), &pgstore.Config{Schema: os.Getenv(sagaWorkerEnv), Lease: 2 * time.Second})
	})
}

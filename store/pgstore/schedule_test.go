package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/pgstore"
)

// scheduleWorkerEnv routes a test process to runScheduleWorker.
const scheduleWorkerEnv = "IDEM_PG_SCHEDULE_WORKER_SCHEMA"

// runScheduleWorker is a replica that registers Every("beat", 200ms) and
// handles its messages, until SIGTERM.
func runScheduleWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	enginetest.SignalReady()
	st, err := pgstore.Open(ctx, os.Getenv("IDEM_TEST_PG_URL"), &pgstore.Config{Schema: os.Getenv(scheduleWorkerEnv), Lease: 2 * time.Second})
	if err != nil && ctx.Err() != nil {
		return 0 // stopped while opening
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "schedule worker:", err)
		return 2
	}
	defer st.Close()
	e, err := idem.NewEngine(st, st, &idem.Config{TimerInterval: 20 * time.Millisecond, Lanes: 2})
	if err == nil {
		err = e.Handle(saga.MessageType(enginetest.Beat{}), func(context.Context, idem.Envelope) error { return nil })
	}
	if err == nil {
		err = e.Every("beat", 200*time.Millisecond, enginetest.Beat{Note: "beat"})
	}
	if err == nil {
		err = e.Run(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "schedule worker:", err)
		return 1
	}
	return 0
}

// Three replica processes share one schedule ticking every 200ms; one is
// killed with SIGKILL mid-run. Triggers in the test's schema record every
// enqueue of a tick's message and every committed advance of the
// schedule: each tick is enqueued once, each claim published its tick, and
// every enqueued tick was applied or is still queued.
func TestScheduleReplicasFireEachTickOnce(t *testing.T) {
	url := testenv.PostgresURL(t)
	st := openStore(t, pgstore.Config{})
	conn := schemaConn(t, st.Schema())
	q := enginetest.Rows(conn)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `
CREATE TABLE test_enqueued (id text NOT NULL, tick timestamptz NOT NULL);
CREATE FUNCTION test_record_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO test_enqueued VALUES (NEW.id, (NEW.envelope->'headers'->>'idem-schedule-tick')::timestamptz);
  RETURN NEW;
END $$;
CREATE TRIGGER test_record_enqueue AFTER INSERT ON idem_queue FOR EACH ROW EXECUTE FUNCTION test_record_enqueue();
CREATE TABLE test_advances (from_due timestamptz NOT NULL, to_due timestamptz NOT NULL, fired timestamptz);
CREATE FUNCTION test_record_advance() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.next_due <> OLD.next_due THEN
    INSERT INTO test_advances VALUES (OLD.next_due, NEW.next_due, NEW.last_tick);
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER test_record_advance AFTER UPDATE ON idem_schedules FOR EACH ROW EXECUTE FUNCTION test_record_advance();`); err != nil {
		t.Fatal(err)
	}
	start := func() *exec.Cmd {
		return enginetest.StartWorker(t, scheduleWorkerEnv+"="+st.Schema(), "IDEM_TEST_PG_URL="+url)
	}
	workers := []*exec.Cmd{start(), start(), start()}
	ticks := func(atLeast int) func() (bool, error) {
		return func() (bool, error) {
			var n int
			err := q(`SELECT count(DISTINCT id) FROM test_enqueued`, &n)
			return n >= atLeast, err
		}
	}
	enginetest.WaitFor(t, 60*time.Second, "8 ticks enqueued", ticks(8))
	if err := workers[0].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = workers[0].Wait()
	t.Log("replica 0 killed with SIGKILL")
	enginetest.WaitFor(t, 60*time.Second, "16 ticks enqueued", ticks(16))
	for _, w := range workers[1:] {
		_ = w.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range workers[1:] {
		if err := w.Wait(); err != nil {
			t.Errorf("replica exit: %v", err)
		}
	}

	var rows, distinct, wrongID, applied, queued int
	var span time.Duration
	if err := q(`SELECT count(*), count(DISTINCT id) FROM test_enqueued`, &rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != distinct {
		t.Errorf("%d enqueues for %d tick IDs: a tick was fired twice", rows, distinct)
	}
	// Every committed claim of a tick (an advance of next_due) published
	// the latest due tick, claims form an unbroken chain, and the ticks
	// published are exactly the ticks claimed: none lost, even from the
	// killed replica. Claims that jump more than one tick are the
	// fire-once policy catching up after no replica polled for 200ms (a
	// loaded machine); they publish one message, for the latest tick.
	var advances, broken, notLatest, unmatched, caughtUp int
	if err := q(`SELECT count(*),
  count(*) FILTER (WHERE prev IS NOT NULL AND prev <> from_due),
  count(*) FILTER (WHERE fired IS DISTINCT FROM to_due - interval '200 milliseconds'),
  count(*) FILTER (WHERE to_due - from_due > interval '200 milliseconds')
FROM (SELECT *, lag(to_due) OVER (ORDER BY from_due) AS prev FROM test_advances) a`, &advances, &broken, &notLatest, &caughtUp); err != nil {
		t.Fatal(err)
	}
	if err := q(`SELECT count(*) FROM test_advances a FULL JOIN (SELECT DISTINCT tick FROM test_enqueued) e ON e.tick = a.fired WHERE a.fired IS NULL OR e.tick IS NULL`, &unmatched); err != nil {
		t.Fatal(err)
	}
	if err := q(`SELECT max(tick) - min(tick) FROM test_enqueued`, &span); err != nil {
		t.Fatal(err)
	}
	if broken != 0 || notLatest != 0 || unmatched != 0 || advances != distinct {
		t.Errorf("%d claims for %d ticks published: %d break the chain, %d did not publish the latest due tick, %d claims and ticks do not match", advances, distinct, broken, notLatest, unmatched)
	}
	if caughtUp > 0 {
		t.Logf("%d claims caught up after more than one tick (fire-once policy)", caughtUp)
	}
	// Each ID is the deterministic one of its tick.
	ids, err := conn.Query(ctx, `SELECT id, tick FROM test_enqueued`)
	if err != nil {
		t.Fatal(err)
	}
	for ids.Next() {
		var id string
		var tick time.Time
		if err := ids.Scan(&id, &tick); err != nil {
			t.Fatal(err)
		}
		if id != idem.TickID("beat", tick) {
			wrongID++
		}
	}
	if ids.Close(); wrongID != 0 {
		t.Errorf("%d messages whose ID is not TickID(name, tick)", wrongID)
	}
	if err := q(`SELECT (SELECT count(DISTINCT e.id) FROM test_enqueued e JOIN idem_inbox i ON i.message_id = e.id), (SELECT count(*) FROM idem_queue)`, &applied, &queued); err != nil {
		t.Fatal(err)
	}
	if applied+queued != distinct {
		t.Errorf("%d ticks enqueued, %d applied and %d still queued: a tick message was lost", distinct, applied, queued)
	}
	t.Logf("%d ticks over %s by 3 replicas (one killed): each enqueued once, %d applied, %d queued at stop", distinct, span, applied, queued)
}

package torture

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// The schedules of a run: every worker registers them (Engine.Every), so
// that each tick is claimed by one of several replicas that are killed at
// random; the ledger saga consumes the ticks. The driver records every
// change of a schedule's next tick with a database trigger (the audit
// table), independently of the engine, and the checker matches the
// ticks fired there with the ticks applied (see checkSchedules).

// ScheduleTick is the message of the run's schedules.
type ScheduleTick struct {
	Schedule string `json:"schedule"`
}

// ledgerSagaType is the saga that applies the ticks, one per schedule.
const ledgerSagaType = "torture-schedule"

// ledger is the ledger saga's state: how many ticks it applied.
type ledger struct {
	Ticks int `json:"ticks"`
}

func ledgerMachine() *saga.Machine[ledger] {
	m := saga.New[ledger](ledgerSagaType)
	counting := m.State("Counting")
	tick := saga.NewEvent[ScheduleTick](m, func(e ScheduleTick) string { return e.Schedule })
	count := func(c *saga.Context[ledger], _ ScheduleTick) error {
		c.Data.Ticks++
		return nil
	}
	m.Initially(saga.When(tick).Then(count).TransitionTo(counting))
	m.During(counting, saga.When(tick).Then(count))
	return m
}

// schedule is one of the run's schedules.
type schedule struct {
	name   string
	every  time.Duration
	missed string        // store.MissedFireOnce or store.MissedSkip
	grace  time.Duration // for MissedSkip
}

// runSchedules are the run's schedules: one catches up on missed ticks
// with one message, the other skips ticks found more than 150ms late (a
// worker's poll is every 50ms: skips happen when every worker is down or
// slow, as around a kill or a database restart).
var runSchedules = []schedule{
	{name: "torture-every-1s", every: time.Second, missed: store.MissedFireOnce},
	{name: "torture-skip-700ms", every: 700 * time.Millisecond, missed: store.MissedSkip, grace: 150 * time.Millisecond},
}

// registerSchedules registers the ledger saga and scheds on e.
func registerSchedules(e *idem.Engine, scheds []schedule) error {
	if err := e.Register(ledgerMachine()); err != nil {
		return err
	}
	for _, s := range scheds {
		var opts []idem.ScheduleOption
		if s.missed == store.MissedSkip {
			opts = append(opts, idem.SkipMissed(s.grace))
		}
		if err := e.Every(s.name, s.every, ScheduleTick{Schedule: s.name}, opts...); err != nil {
			return err
		}
	}
	return nil
}

// scheduleRecords are the history's declarations of scheds, written before
// any worker starts: the checker checks the schedules they name.
func scheduleRecords(scheds []schedule) []*Record {
	out := make([]*Record, len(scheds))
	for i, s := range scheds {
		out[i] = &Record{Kind: kindSchedule, Type: saga.MessageType(ScheduleTick{}), Saga: ledgerSagaType, Key: s.name,
			Every: s.every, Missed: s.missed, Grace: s.grace}
	}
	return out
}

// auditTable is where the triggers of installScheduleAudit record every
// schedule created (from_due NULL) and every change of a schedule's next
// tick (an advance: from_due, to_due, and fired, the tick whose message
// the advance published, NULL when it published none), in the same
// transaction as the change. Times are Unix microseconds.
const auditTable = "torture_schedule_advances"

const sqliteAudit = `
CREATE TABLE ` + auditTable + ` (seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, from_due INTEGER, to_due INTEGER NOT NULL, fired INTEGER);
CREATE TRIGGER torture_schedule_created AFTER INSERT ON idem_schedules
BEGIN
  INSERT INTO ` + auditTable + ` (name, to_due) VALUES (NEW.name, NEW.next_due);
END;
CREATE TRIGGER torture_schedule_advanced AFTER UPDATE OF next_due ON idem_schedules WHEN NEW.next_due <> OLD.next_due
BEGIN
  INSERT INTO ` + auditTable + ` (name, from_due, to_due, fired)
  VALUES (NEW.name, OLD.next_due, NEW.next_due, CASE WHEN NEW.last_tick IS NOT OLD.last_tick THEN NEW.last_tick END);
END;`

// pgAudit is sqliteAudit for PostgreSQL; %[1]s is the run's schema.
const pgAudit = `
CREATE TABLE %[1]s.` + auditTable + ` (seq bigserial PRIMARY KEY, name text NOT NULL, from_due bigint, to_due bigint NOT NULL, fired bigint);
CREATE FUNCTION %[1]s.torture_record_schedule() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO %[1]s.` + auditTable + ` (name, to_due) VALUES (NEW.name, (extract(epoch FROM NEW.next_due) * 1000000)::bigint);
  ELSIF NEW.next_due <> OLD.next_due THEN
    INSERT INTO %[1]s.` + auditTable + ` (name, from_due, to_due, fired)
    VALUES (NEW.name, (extract(epoch FROM OLD.next_due) * 1000000)::bigint, (extract(epoch FROM NEW.next_due) * 1000000)::bigint,
      CASE WHEN NEW.last_tick IS DISTINCT FROM OLD.last_tick THEN (extract(epoch FROM NEW.last_tick) * 1000000)::bigint END);
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER torture_record_schedule AFTER INSERT OR UPDATE ON %[1]s.idem_schedules
FOR EACH ROW EXECUTE FUNCTION %[1]s.torture_record_schedule();`

// installScheduleAudit creates the audit table and its triggers in the
// store's database (migrated already), before any worker starts.
func installScheduleAudit(ctx context.Context, storeSpec, schema string) error {
	var db *sql.DB
	var ddl string
	var err error
	if isPostgres(storeSpec) {
		db, err = openDB(storeSpec, schema)
		ddl = fmt.Sprintf(pgAudit, pgx.Identifier{schema}.Sanitize())
	} else {
		db, err = sql.Open("sqlite", "file:"+storeSpec+"?_pragma=busy_timeout(10000)")
		ddl = sqliteAudit
	}
	if err != nil {
		return fmt.Errorf("install the schedule audit: %w", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("install the schedule audit: %w", err)
	}
	return nil
}

// advance is one row of the audit table.
type advance struct {
	seq         int64
	name        string
	from, fired sql.NullInt64
	to          int64
}

// readAdvances reads the audit table from row after on, in order.
func readAdvances(ctx context.Context, db *sql.DB, after int64) ([]advance, error) {
	var out []advance
	err := scanRows(ctx, db, `SELECT seq, name, from_due, to_due, fired FROM `+auditTable+` ORDER BY seq`, func(r *sql.Rows) error {
		var a advance
		if err := r.Scan(&a.seq, &a.name, &a.from, &a.to, &a.fired); err != nil {
			return err
		}
		if a.seq > after {
			out = append(out, a)
		}
		return nil
	})
	return out, err
}

// tickCopier is the duplicates fault for schedules: it publishes a second
// copy of each tick fired (as an outbox relay does after a crash between
// publish and mark-sent), which the ledger's inbox must drop.
type tickCopier struct {
	st   store.Scheduler
	pub  transport.Publisher
	db   *sql.DB
	last int64 // the last audit row copied
}

// copyNew publishes a copy of each tick fired since the last call, and
// returns how many it published.
func (c *tickCopier) copyNew(ctx context.Context) (int, error) {
	advs, err := readAdvances(ctx, c.db, c.last)
	if err != nil {
		return 0, err
	}
	templates := map[string]transport.Envelope{}
	var envs []transport.Envelope
	for _, a := range advs {
		if !a.fired.Valid {
			continue
		}
		tmpl, ok := templates[a.name]
		if !ok {
			s, err := c.st.GetSchedule(ctx, a.name)
			if err != nil {
				return 0, fmt.Errorf("copy ticks: %w", err)
			}
			tmpl, templates[a.name] = s.Envelope, s.Envelope
		}
		envs = append(envs, tickMessage(tmpl, a.name, time.UnixMicro(a.fired.Int64)))
	}
	if len(envs) > 0 {
		if err := c.pub.Publish(ctx, envs); err != nil {
			return 0, fmt.Errorf("copy ticks: %w", err)
		}
	}
	if len(advs) > 0 {
		c.last = advs[len(advs)-1].seq
	}
	return len(envs), nil
}

// tickMessage is the message of schedule name's tick, as the engine builds
// it from the stored template.
func tickMessage(tmpl transport.Envelope, name string, tick time.Time) transport.Envelope {
	env := tmpl.Clone()
	env.ID, env.SentAt = idem.TickID(name, tick), time.Now().UTC()
	if env.Headers == nil {
		env.Headers = map[string]string{}
	}
	env.Headers[idem.HeaderSchedule] = name
	env.Headers[idem.HeaderScheduleTick] = tick.UTC().Format(time.RFC3339Nano)
	return env
}

// pauseSchedules pauses the run's schedules when the workload stops, so
// that the run can settle; a pass that read a schedule before the pause
// may still fire it once. It retries for a minute while the database is
// unavailable.
func pauseSchedules(ctx context.Context, st store.Scheduler, scheds []schedule) error {
	deadline := time.Now().Add(time.Minute)
	for _, s := range scheds {
		for {
			err := st.PauseSchedule(ctx, s.name, true, time.Now())
			if err == nil || errors.Is(err, store.ErrNotFound) {
				break // not found: no worker ever started; the checker says so
			}
			if ctx.Err() != nil || time.Now().After(deadline) {
				return fmt.Errorf("pause schedule %s: %w", s.name, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond): // the database is coming back
			}
		}
	}
	return nil
}

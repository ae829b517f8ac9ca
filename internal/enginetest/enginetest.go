// Package enginetest is the exactly-once workload the SQL stores' engine
// tests share: a counter saga whose increments publish an event and whose
// first increment schedules a timer, a workload publishing every message
// several times, and checks made from the database afterwards.
package enginetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/countersaga"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
	"github.com/jackc/pgx/v5"
)

// The counter saga lives in internal/countersaga, which the idem binary
// (idem torture) uses without linking package testing; these names keep
// the tests that use it through this package unchanged.
type (
	// Counter is the saga's state document.
	Counter = countersaga.Counter
	// Inc adds N to the saga Key.
	Inc = countersaga.Inc
	// Added is published by every increment.
	Added = countersaga.Added
	// Tick is the timer the first increment schedules; it adds 1000.
	Tick = countersaga.Tick
)

// SagaType is the counter saga's type.
const SagaType = countersaga.SagaType

// Machine builds the counter saga.
func Machine() *saga.Machine[Counter] { return countersaga.Machine() }

// NewEngine runs the counter saga and a no-op consumer of its events on st
// and tr (usually the same store, as its own queue).
func NewEngine(t testing.TB, st store.Store, tr transport.Transport, cfg *idem.Config) *idem.Engine {
	t.Helper()
	e := NewSagaEngine(t, st, tr, cfg)
	if err := e.Handle(saga.MessageType(Added{}), func(context.Context, idem.Envelope) error { return nil }); err != nil {
		t.Fatal(err)
	}
	return e
}

// NewSagaEngine runs the counter saga alone on st and tr: its events must
// go elsewhere (a rule diverting them from the queue, for instance), or
// they are dead-lettered. An engine with no plain handler, one lane per
// batch and no key order shared by its consumers claims a backlog inside
// its units of work on a store that can.
func NewSagaEngine(t testing.TB, st store.Store, tr transport.Transport, cfg *idem.Config) *idem.Engine {
	t.Helper()
	if cfg == nil {
		cfg = &idem.Config{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.TimerInterval == 0 {
		cfg.TimerInterval = 20 * time.Millisecond
	}
	e, err := idem.NewEngine(st, tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(Machine()); err != nil {
		t.Fatal(err)
	}
	return e
}

// Workload publishes keys×perKey increments, each message copies times,
// copy c through publishers[c % len(publishers)], and returns the expected
// total per key (the timer adds 1000 to each).
func Workload(t testing.TB, publishers []*idem.Engine, keys, perKey, copies int) map[string]int {
	t.Helper()
	want := map[string]int{}
	envs := make([][]idem.Envelope, len(publishers))
	for i := range perKey {
		for k := range keys {
			key := fmt.Sprintf("k-%03d", k)
			env, err := publishers[0].NewEnvelope(fmt.Sprintf("inc-%s-%d", key, i), Inc{Key: key, N: i + 1})
			if err != nil {
				t.Fatal(err)
			}
			want[key] += i + 1
			for c := range copies {
				p := c % len(publishers)
				envs[p] = append(envs[p], env)
			}
		}
	}
	for k := range want {
		want[k] += 1000
	}
	for p, e := range publishers {
		for start := 0; start < len(envs[p]); start += 500 {
			if err := e.Publish(context.Background(), envs[p][start:min(start+500, len(envs[p]))]...); err != nil {
				t.Fatal(err)
			}
		}
	}
	return want
}

// QueryRow runs a one-row query against the store's database and scans it.
type QueryRow func(query string, dest ...any) error

// WaitSettled waits until the queue and the timers are empty.
func WaitSettled(t testing.TB, q QueryRow, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var queued, timers int
		if err := q(`SELECT (SELECT count(*) FROM idem_queue), (SELECT count(*) FROM idem_timers)`, &queued, &timers); err != nil {
			t.Fatal(err)
		}
		if queued == 0 && timers == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue (%d) and timers (%d) not drained after %s", queued, timers, timeout)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
}

// WaitFor polls done until it reports true, failing t with what after
// timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, done func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := done()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s after %s", what, timeout)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
}

// CheckExactlyOnce verifies, from the database, that every increment and
// timer applied once (totals and journal), every emitted event was consumed
// under its deterministic ID, and nothing was dead-lettered.
func CheckExactlyOnce(t *testing.T, st store.Store, q QueryRow, want map[string]int, perKey int) {
	t.Helper()
	CheckSagasExactlyOnce(t, st, q, want, perKey)
	var handled int
	if err := q(`SELECT count(*) FROM idem_inbox WHERE saga_type = 'idem.handler'`, &handled); err != nil {
		t.Fatal(err)
	}
	if wantH := len(want) * perKey; handled != wantH {
		t.Errorf("emitted events consumed: %d distinct IDs, want %d (one per increment)", handled, wantH)
	}
}

// CheckSagasExactlyOnce is CheckExactlyOnce without the consumer of the
// emitted events (NewSagaEngine): totals, journal and no dead letters.
func CheckSagasExactlyOnce(t *testing.T, st store.Store, q QueryRow, want map[string]int, perKey int) {
	t.Helper()
	got := map[string]int{}
	for after := ""; ; {
		page, err := st.ListInstances(context.Background(), &store.ListParams{SagaType: SagaType, After: after, Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range page {
			var c Counter
			if err := json.Unmarshal(in.Data, &c); err != nil {
				t.Fatal(err)
			}
			got[in.Key] = c.Total
		}
		if len(page) < 500 {
			break
		}
		after = page[len(page)-1].Key
	}
	if len(got) != len(want) {
		t.Errorf("sagas: got %d, want %d", len(got), len(want))
	}
	bad := 0
	for k, w := range want {
		if got[k] != w && bad < 5 {
			bad++
			t.Errorf("saga %s: total %d, want %d (an increment applied twice or lost)", k, got[k], w)
		}
	}
	var journal, distinct, dead int
	if err := q(`SELECT count(*) FROM idem_journal WHERE saga_type = 'counter'`, &journal); err != nil {
		t.Fatal(err)
	}
	if err := q(`SELECT count(*) FROM (SELECT DISTINCT key, message_id FROM idem_journal WHERE saga_type = 'counter') d`, &distinct); err != nil {
		t.Fatal(err)
	}
	if wantJ := len(want) * (perKey + 1); journal != wantJ || distinct != wantJ {
		t.Errorf("journal: %d entries (%d distinct), want %d: each increment and timer applied once", journal, distinct, wantJ)
	}
	if err := q(`SELECT count(*) FROM idem_dead_letters`, &dead); err != nil || dead != 0 {
		t.Errorf("dead letters: %d (%v), want 0", dead, err)
	}
}

// SchemaConn connects to the PostgreSQL server at url with search_path set
// to schema, for reading a store's tables; it is closed when t ends.
func SchemaConn(t testing.TB, url, schema string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Rows is the QueryRow of a PostgreSQL connection.
func Rows(conn *pgx.Conn) QueryRow {
	return func(q string, dest ...any) error { return conn.QueryRow(context.Background(), q).Scan(dest...) }
}

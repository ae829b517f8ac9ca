package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"

	"github.com/idemhq/idem/store/sqlitestore"
)

// Tables names a ledger table and the notification table written with it.
type Tables struct {
	Ledger, Notifications string
}

// The ledger the Idem writer appends to, and the tables the naive writer of
// the incident uses (no unique constraint, no trigger). The naive tables exist
// only to show that the validator catches what the incident did.
var (
	Strict = Tables{Ledger: "dispatch_ledger", Notifications: "dispatch_notifications"}
	Naive  = Tables{Ledger: "naive_ledger", Notifications: "naive_notifications"}
)

// Event is one dispatch event about a pseudonymised patient.
type Event struct {
	Patient string          `json:"patient"`
	Seq     int64           `json:"seq"`
	Kind    Kind            `json:"kind"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// ID returns the event's deterministic identity (see EventID).
func (e Event) ID() string { return EventID(e.Patient, e.Seq, e.Kind) }

// Check reports whether e is well formed: a pseudonym (never a raw id), a
// positive sequence number, a known kind and a JSON object or no payload.
func (e Event) Check() error {
	switch {
	case !ValidPseudonym(e.Patient):
		return errors.New("patient is not a pseudonym")
	case e.Seq < 1:
		return fmt.Errorf("seq %d: must be at least 1", e.Seq)
	case !e.Kind.Valid():
		return fmt.Errorf("unknown kind %q", e.Kind)
	case len(e.Payload) > 0 && (!json.Valid(e.Payload) || e.Payload[0] != '{'):
		return errors.New("payload is not a JSON object")
	}
	return nil
}

// Row is one ledger row, as the validator reads it.
type Row struct {
	Position int64  `json:"position"`
	EventID  string `json:"event_id"`
	Patient  string `json:"patient"`
	Seq      int64  `json:"seq"`
	Kind     Kind   `json:"kind"`
	Writer   string `json:"writer"`
}

// Notification is one sent dispatch notification.
type Notification struct {
	Position int64  `json:"position"`
	EventID  string `json:"event_id"`
	Writer   string `json:"writer"`
}

// DB is the ledger database: a SQLite file (modernc.org/sqlite) or a
// PostgreSQL schema (pgx v5), usually the same file or database as Idem's
// store.
type DB struct {
	db     *sql.DB
	pg     bool
	schema string
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// IsPostgres reports whether dsn names a PostgreSQL database rather than a
// SQLite file.
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// Open opens the ledger database: dsn is a postgres:// URL (tables in schema)
// or the path of a SQLite file (schema is ignored).
func Open(ctx context.Context, dsn, schema string) (*DB, error) {
	d := &DB{pg: IsPostgres(dsn), schema: schema}
	var err error
	if d.pg {
		if !identRE.MatchString(schema) {
			return nil, fmt.Errorf("open ledger: schema %q is not a plain identifier", schema)
		}
		d.db, err = sql.Open("pgx", dsn)
	} else {
		if dsn == "" || strings.Contains(dsn, "?") {
			return nil, fmt.Errorf("open ledger: %q is not a SQLite file path", dsn)
		}
		// BEGIN IMMEDIATE: a transaction that will write takes the write
		// lock at once instead of failing to upgrade a read snapshot.
		d.db, err = sql.Open("sqlite", "file:"+dsn+"?_pragma=busy_timeout(20000)&_pragma=synchronous(FULL)&_txlock=immediate")
	}
	if err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	if err := d.ping(ctx); err != nil {
		d.db.Close()
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	return d, nil
}

// ping checks the connection and, on SQLite, puts the file in WAL mode.
// Writers that start together create the file together, and SQLite
// refuses all but one of them the switch at once (SQLITE_BUSY, whatever
// the busy timeout): sqlitestore.SetWAL tries again, where a
// journal_mode(WAL) pragma in the DSN would fail.
func (d *DB) ping(ctx context.Context) error {
	if d.pg {
		return d.db.PingContext(ctx)
	}
	mode, err := sqlitestore.SetWAL(ctx, d.db, 20*time.Second)
	if err == nil && mode != "wal" {
		err = fmt.Errorf("the file stays in journal mode %q, not WAL: put it on a local disk", mode)
	}
	return err
}

// Close closes the database.
func (d *DB) Close() error { return d.db.Close() }

// Table returns the name of a table as SQL must spell it (schema-qualified
// on PostgreSQL).
func (d *DB) Table(name string) string { return table(d.pg, d.schema, name) }

// Migrate creates the ledger and notification tables (t = Strict) or the
// naive ones (t = Naive) if they are missing. It is idempotent and safe to
// run from several processes at once.
func (d *DB) Migrate(ctx context.Context, t Tables) error {
	strict := t == Strict
	var stmts []string
	if d.pg {
		stmts = d.pgSchema(t, strict)
	} else {
		stmts = d.sqliteSchema(t, strict)
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate ledger: %w", err)
	}
	defer tx.Rollback()
	if d.pg {
		// Concurrent CREATE ... IF NOT EXISTS can still collide in the
		// catalog: take turns.
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "dispatch-migrate:"+d.schema); err != nil {
			return fmt.Errorf("migrate ledger: %w", err)
		}
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("migrate ledger: %s: %w", firstLine(s), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate ledger: %w", err)
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

const kindCheck = "CHECK (kind IN ('REQUESTED', 'CONFIRMED', 'LAUNCHED', 'CANCELLED'))"

// uniqueSeq is the ledger's invariant, one event per patient and sequence
// number, as a constraint of t. The saga keeps it by itself (it appends
// only the event after the patient's last, and copies stop before the
// insert); the constraint guards it against any other writer of the
// table. The event ID needs no constraint of its own: it is derived from
// (patient, seq, kind).
func uniqueSeq(t Tables) string {
	return `,
	CONSTRAINT ` + t.Ledger + `_patient_seq_key UNIQUE (patient, seq)`
}

func (d *DB) sqliteSchema(t Tables, strict bool) []string {
	uniq := ""
	if strict {
		uniq = uniqueSeq(t)
	}
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + t.Ledger + ` (
	position INTEGER PRIMARY KEY AUTOINCREMENT,
	event_id TEXT NOT NULL,
	patient TEXT NOT NULL,
	seq INTEGER NOT NULL CHECK (seq > 0),
	kind TEXT NOT NULL ` + kindCheck + `,
	payload TEXT NOT NULL,
	writer TEXT NOT NULL,
	recorded_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))` + uniq + `
)`,
		`CREATE TABLE IF NOT EXISTS ` + t.Notifications + ` (
	position INTEGER PRIMARY KEY AUTOINCREMENT,
	event_id TEXT NOT NULL,
	writer TEXT NOT NULL,
	sent_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)`,
	}
	if strict {
		for _, tbl := range []string{t.Ledger, t.Notifications} {
			for _, op := range []string{"UPDATE", "DELETE"} {
				stmts = append(stmts, `CREATE TRIGGER IF NOT EXISTS `+tbl+`_no_`+strings.ToLower(op)+`
BEFORE `+op+` ON `+tbl+`
BEGIN SELECT RAISE(ABORT, '`+tbl+` is append-only: `+op+` refused'); END`)
			}
		}
	} else {
		stmts = append(stmts, `CREATE TABLE IF NOT EXISTS naive_last_seq (patient TEXT PRIMARY KEY, seq INTEGER NOT NULL)`)
	}
	return stmts
}

func (d *DB) pgSchema(t Tables, strict bool) []string {
	s := pgx.Identifier{d.schema}.Sanitize() // quoted: as pgstore names it
	uniq := ""
	if strict {
		uniq = uniqueSeq(t)
	}
	stmts := []string{
		`CREATE SCHEMA IF NOT EXISTS ` + s,
		`CREATE TABLE IF NOT EXISTS ` + s + `.` + t.Ledger + ` (
	position BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	event_id TEXT NOT NULL,
	patient TEXT NOT NULL,
	seq BIGINT NOT NULL CHECK (seq > 0),
	kind TEXT NOT NULL ` + kindCheck + `,
	payload JSONB NOT NULL,
	writer TEXT NOT NULL,
	recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()` + uniq + `
)`,
		`CREATE TABLE IF NOT EXISTS ` + s + `.` + t.Notifications + ` (
	position BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	event_id TEXT NOT NULL,
	writer TEXT NOT NULL,
	sent_at TIMESTAMPTZ NOT NULL DEFAULT now()
)`,
	}
	if strict {
		stmts = append(stmts, `CREATE OR REPLACE FUNCTION `+s+`.dispatch_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
		USING ERRCODE = 'insufficient_privilege';
END
$$`)
		for _, tbl := range []string{t.Ledger, t.Notifications} {
			stmts = append(stmts,
				`CREATE OR REPLACE TRIGGER `+tbl+`_append_only BEFORE UPDATE OR DELETE ON `+s+`.`+tbl+`
FOR EACH ROW EXECUTE FUNCTION `+s+`.dispatch_refuse_change()`,
				`CREATE OR REPLACE TRIGGER `+tbl+`_no_truncate BEFORE TRUNCATE ON `+s+`.`+tbl+`
FOR EACH STATEMENT EXECUTE FUNCTION `+s+`.dispatch_refuse_change()`)
		}
	} else {
		stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+s+`.naive_last_seq (patient TEXT PRIMARY KEY, seq BIGINT NOT NULL)`)
	}
	return stmts
}

func payloadText(p json.RawMessage) string {
	if len(p) == 0 {
		return "{}"
	}
	return string(p)
}

// NaiveAppend is the writer of the incident, kept to show what the validator
// catches: the idempotency key is the patient and the wall clock, the only
// guard is a "last sequence" cache read outside any transaction, and a cache
// read slower than cacheTimeout is treated as a miss (fail open). stall is
// the cache latency. Each write sends a notification.
func (d *DB) NaiveAppend(ctx context.Context, ev Event, writer string, stall, cacheTimeout time.Duration) (bool, error) {
	L, N, C := d.Table(Naive.Ledger), d.Table(Naive.Notifications), d.Table("naive_last_seq")
	var last int64
	err := d.db.QueryRowContext(ctx, `SELECT seq FROM `+C+` WHERE patient = $1`, ev.Patient).Scan(&last)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("naive append: %w", err)
	}
	if stall > 0 {
		t := time.NewTimer(stall)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
	}
	if stall <= cacheTimeout && last >= ev.Seq {
		return false, nil // "stale event ignored"
	}
	key := fmt.Sprintf("%s:%d", ev.Patient[:10], time.Now().UnixMilli())
	cast := ""
	if d.pg {
		cast = "::jsonb"
	}
	if _, err := d.db.ExecContext(ctx, `INSERT INTO `+L+` (event_id, patient, seq, kind, payload, writer) VALUES ($1, $2, $3, $4, $5`+cast+`, $6)`,
		key, ev.Patient, ev.Seq, string(ev.Kind), payloadText(ev.Payload), writer); err != nil {
		return false, fmt.Errorf("naive append: %w", err)
	}
	if _, err := d.db.ExecContext(ctx, `INSERT INTO `+N+` (event_id, writer) VALUES ($1, $2)`, key, writer); err != nil {
		return false, fmt.Errorf("naive notify: %w", err)
	}
	if _, err := d.db.ExecContext(ctx, `INSERT INTO `+C+` (patient, seq) VALUES ($1, $2)
ON CONFLICT (patient) DO UPDATE SET seq = excluded.seq`, ev.Patient, ev.Seq); err != nil {
		return false, fmt.Errorf("naive cache: %w", err)
	}
	return true, nil
}

// Rows returns the rows of ledger table t.Ledger in append order.
func (d *DB) Rows(ctx context.Context, t Tables) ([]Row, error) {
	rs, err := d.db.QueryContext(ctx, `SELECT position, event_id, patient, seq, kind, writer FROM `+d.Table(t.Ledger)+` ORDER BY position`)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", t.Ledger, err)
	}
	defer rs.Close()
	var out []Row
	for rs.Next() {
		var r Row
		var k string
		if err := rs.Scan(&r.Position, &r.EventID, &r.Patient, &r.Seq, &k, &r.Writer); err != nil {
			return nil, fmt.Errorf("read %s: %w", t.Ledger, err)
		}
		r.Kind = Kind(k)
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", t.Ledger, err)
	}
	return out, nil
}

// Notifications returns the notifications of t in the order they were sent.
func (d *DB) Notifications(ctx context.Context, t Tables) ([]Notification, error) {
	rs, err := d.db.QueryContext(ctx, `SELECT position, event_id, writer FROM `+d.Table(t.Notifications)+` ORDER BY position`)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", t.Notifications, err)
	}
	defer rs.Close()
	var out []Notification
	for rs.Next() {
		var n Notification
		if err := rs.Scan(&n.Position, &n.EventID, &n.Writer); err != nil {
			return nil, fmt.Errorf("read %s: %w", t.Notifications, err)
		}
		out = append(out, n)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", t.Notifications, err)
	}
	return out, nil
}

// Exec runs one statement; tests use it to try statements the ledger
// refuses (an UPDATE, a DELETE, a second event at a seq).
func (d *DB) Exec(ctx context.Context, query string, args ...any) error {
	_, err := d.db.ExecContext(ctx, query, args...)
	return err
}

// SQL returns the underlying database, for tools that scan it.
func (d *DB) SQL() *sql.DB { return d.db }

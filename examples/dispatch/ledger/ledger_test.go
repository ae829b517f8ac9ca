package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemhq/idem/examples/dispatch/ledger"
)

// rawID is the raw identifier of patient i: what must never be stored.
func rawID(i int) string { return fmt.Sprintf("756.%04d.%04d.%02d", 1000+i, 2000+i, i) }

// scenario is the event stream of the incident replay: for each patient a
// mission launched, cancelled after confirmation or cancelled at once, then
// for some a second mission.
func scenario(patients int) (evs []ledger.RawEvent, confirmed, launched int) {
	for i := range patients {
		id := rawID(i)
		seq := int64(0)
		ev := func(k ledger.Kind) {
			seq++
			evs = append(evs, ledger.RawEvent{PatientID: id, Seq: seq, Kind: k, Payload: json.RawMessage(`{"zone":"A12","drop":"insulin"}`)})
			switch k {
			case ledger.Confirmed:
				confirmed++
			case ledger.Launched:
				launched++
			}
		}
		switch i % 3 {
		case 0:
			ev(ledger.Requested)
			ev(ledger.Confirmed)
			ev(ledger.Launched)
		case 1:
			ev(ledger.Requested)
			ev(ledger.Confirmed)
			ev(ledger.Cancelled)
		case 2:
			ev(ledger.Requested)
			ev(ledger.Cancelled)
		}
		if i%2 == 0 {
			ev(ledger.Requested)
			ev(ledger.Confirmed)
			ev(ledger.Launched)
		}
	}
	return evs, confirmed, launched
}

func openDB(t *testing.T, b backend) *ledger.DB {
	t.Helper()
	ctx := context.Background()
	d, err := ledger.Open(ctx, b.dsn, b.schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(ctx, ledger.Strict); err != nil {
		t.Fatal(err)
	}
	return d
}

// The ledger is append-only, and its one constraint, one event per patient
// and sequence number, refuses a row that another writer than the saga
// would add at a held seq. A raw patient id never gets as far as a message.
func TestLedgerIsAppendOnlyWithOneEventPerSeq(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		d := openDB(t, b)
		if err := d.Migrate(ctx, ledger.Strict); err != nil { // idempotent
			t.Fatalf("second migrate: %v", err)
		}
		w := startWriter(t, b, ledger.WriterConfig{})
		pn, _ := pseudonymizer(t).Pseudonym(rawID(1))
		mustApply(t, w, ledger.Event{Patient: pn, Seq: 1, Kind: ledger.Requested})
		mustApply(t, w, ledger.Event{Patient: pn, Seq: 2, Kind: ledger.Confirmed})
		if err := w.Publish(ctx, []ledger.Event{{Patient: rawID(1), Seq: 3, Kind: ledger.Launched}}); err == nil {
			t.Fatal("publish with a raw patient id succeeded")
		}

		cancel := ledger.Event{Patient: pn, Seq: 2, Kind: ledger.Cancelled}
		err := d.Exec(ctx, `INSERT INTO `+d.Table(ledger.Strict.Ledger)+` (event_id, patient, seq, kind, payload, writer)
VALUES ($1, $2, $3, $4, '{}', 'manual')`, cancel.ID(), cancel.Patient, cancel.Seq, string(cancel.Kind))
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unique") {
			t.Errorf("insert of a CANCELLED at the CONFIRMED's seq: %v, want refused by the unique constraint", err)
		}

		rows, err := d.Rows(ctx, ledger.Strict)
		if err != nil {
			t.Fatal(err)
		}
		notes, err := d.Notifications(ctx, ledger.Strict)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 2 || len(notes) != 2 {
			t.Fatalf("%d rows and %d notifications, want 2 and 2", len(rows), len(notes))
		}
		if rep := ledger.Validate(rows, notes); !rep.OK() {
			t.Fatalf("violations: %+v", rep.Violations)
		}

		for _, tbl := range []string{ledger.Strict.Ledger, ledger.Strict.Notifications} {
			T := d.Table(tbl)
			for _, q := range []string{
				"UPDATE " + T + " SET writer = 'x'",
				"DELETE FROM " + T,
			} {
				err := d.Exec(ctx, q)
				if err == nil || !strings.Contains(err.Error(), "append-only") {
					t.Errorf("%s: %v, want refused as append-only", q, err)
				}
			}
		}
		if b.name == "postgres" {
			if err := d.Exec(ctx, "TRUNCATE "+d.Table(ledger.Strict.Ledger)); err == nil || !strings.Contains(err.Error(), "append-only") {
				t.Errorf("TRUNCATE: %v, want refused", err)
			}
		}
		if rows2, _ := d.Rows(ctx, ledger.Strict); len(rows2) != 2 {
			t.Fatalf("ledger changed: %d rows", len(rows2))
		}
	})
}

// One writer, events with a duplicate, an out-of-order pair and an illegal
// transition: the ledger holds each legal event once, in sequence order, the
// illegal one is dead-lettered, and replay gives each patient's state.
func TestWriteThenValidate(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		a, c := rawID(1), rawID(2)
		evs := []ledger.RawEvent{
			{PatientID: a, Seq: 1, Kind: ledger.Requested},
			{PatientID: a, Seq: 2, Kind: ledger.Confirmed},
			{PatientID: " " + a, Seq: 2, Kind: ledger.Confirmed}, // same patient, written differently, same event
			{PatientID: a, Seq: 3, Kind: ledger.Launched},
			{PatientID: c, Seq: 2, Kind: ledger.Launched}, // before its predecessor, and illegal after REQUESTED
			{PatientID: c, Seq: 1, Kind: ledger.Requested},
			{PatientID: c, Seq: 3, Kind: ledger.Cancelled}, // waits for seq 2, which never comes
		}
		path := writeEvents(t, evs[:6])
		code, out, errOut := runMain(t, append(append([]string{"write"}, b.args()...), "-events", path, "-name", "w1", "-timeout", "60s")...)
		if code != 0 {
			t.Fatalf("write exit %d: %s\n%s", code, out, errOut)
		}
		var sum ledger.WriteSummary
		if err := json.Unmarshal([]byte(out), &sum); err != nil {
			t.Fatal(err)
		}
		if sum.Dead != 1 || sum.Dups != 1 {
			t.Errorf("summary %+v: want 1 dead letter (the illegal LAUNCHED) and 1 duplicate", sum)
		}
		code, rep := validate(t, b)
		if code != 0 || !rep.OK() || rep.Rows != 4 || rep.Notifications != 4 || rep.Patients != 2 {
			t.Fatalf("validate exit %d: %+v; want ok, 4 rows, 4 notifications, 2 patients", code, rep)
		}
		d := openDB(t, b)
		rows, _ := d.Rows(context.Background(), ledger.Strict)
		p := pseudonymizer(t)
		pa, _ := p.Pseudonym(a)
		pc, _ := p.Pseudonym(c)
		states := ledger.Replay(rows)
		if got, want := states[pa], (ledger.PatientState{LastSeq: 3, Mission: 1, Status: ledger.Launched}); got != want {
			t.Errorf("state of a: %+v, want %+v", got, want)
		}
		if got, want := states[pc], (ledger.PatientState{LastSeq: 1, Mission: 1, Status: ledger.Requested}); got != want {
			t.Errorf("state of c: %+v, want %+v", got, want)
		}
	})
}

// The raw patient id appears nowhere in the database: not in the ledger,
// not in Idem's queue, inbox, journal or saga state, not in the file.
func TestRawPatientIDNeverStored(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		evs, _, _ := scenario(4)
		path := writeEvents(t, evs)
		if code, out, errOut := runMain(t, append(append([]string{"write"}, b.args()...), "-events", path, "-timeout", "60s")...); code != 0 {
			t.Fatalf("write exit %d: %s\n%s", code, out, errOut)
		}
		d := openDB(t, b)
		needles := []string{testKey}
		for i := range 4 {
			needles = append(needles, rawID(i), strings.ReplaceAll(rawID(i), ".", ""))
		}
		texts := dumpAllTables(t, d, b)
		if len(texts) < 30 {
			t.Fatalf("scanned only %d values: the scan is not looking at the data", len(texts))
		}
		p := pseudonymizer(t)
		pn, _ := p.Pseudonym(rawID(0))
		found := false
		for _, s := range texts {
			found = found || strings.Contains(s, pn)
			for _, n := range needles {
				if strings.Contains(s, n) {
					t.Errorf("raw patient id or key %q stored: %.200s", n, s)
				}
			}
		}
		if !found {
			t.Errorf("pseudonym %s not found either: the scan missed the data", pn)
		}
		if b.name == "sqlite" {
			for _, f := range []string{b.dsn, b.dsn + "-wal"} {
				raw, err := os.ReadFile(f)
				if err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
				for _, n := range needles {
					if strings.Contains(string(raw), n) {
						t.Errorf("%s holds %q", filepath.Base(f), n)
					}
				}
			}
		}
	})
}

// dumpAllTables returns every row of every table of the test's database as
// text.
func dumpAllTables(t *testing.T, d *ledger.DB, b backend) []string {
	t.Helper()
	ctx := context.Background()
	db := d.SQL()
	var q string
	if b.name == "postgres" {
		q = "SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables WHERE table_schema = '" + b.schema + "'"
	} else {
		q = "SELECT name FROM sqlite_master WHERE type = 'table'"
	}
	rs, err := db.QueryContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rs.Next() {
		var n string
		rs.Scan(&n)
		tables = append(tables, n)
	}
	rs.Close()
	if len(tables) < 5 {
		t.Fatalf("found tables %v: want Idem's and the ledger's", tables)
	}
	var out []string
	for _, tbl := range tables {
		rs, err := db.QueryContext(ctx, "SELECT * FROM "+tbl)
		if err != nil {
			t.Fatalf("%s: %v", tbl, err)
		}
		cols, _ := rs.Columns()
		for rs.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rs.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				switch x := v.(type) {
				case []byte:
					out = append(out, string(x))
				case string:
					out = append(out, x)
				default:
					if v != nil {
						if j, err := json.Marshal(v); err == nil {
							out = append(out, string(j))
						}
					}
				}
			}
		}
		rs.Close()
	}
	return out
}

// The incident, replayed: two writer processes receive the same events
// within milliseconds of each other, and one of them stalls 200–900 ms
// between loading and committing every unit of work, its ledger rows
// written but not committed. No confirmation and no launch is recorded or
// notified twice.
func TestIncidentReplay(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		const patients = 6
		evs, confirmed, launched := scenario(patients)
		path := writeEvents(t, evs)
		// Migrate first, so that the writers start as they would in
		// production: on an existing database.
		openDB(t, b)
		base := append(append([]string{"write"}, b.args()...), "-events", path, "-wait-start", "-interval", "40ms", "-timeout", "90s")
		fast := startChild(t, append(base, "-name", "aurora-2")...)
		slow := startChild(t, append(base, "-name", "aurora-7", "-stall", "200ms-900ms")...)
		fast.ready(t)
		slow.ready(t)
		// Both receive the events within milliseconds of each other.
		for _, c := range []*child{slow, fast} {
			if _, err := c.stdin.Write([]byte("go\n")); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		var sums [2]ledger.WriteSummary
		var errs [2]error
		for i, c := range []*child{fast, slow} {
			wg.Go(func() { sums[i], errs[i] = c.result() })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("writers: %+v", sums)

		code, rep := validate(t, b)
		if code != 0 || !rep.OK() {
			t.Fatalf("validate exit %d, violations %+v", code, rep.Violations)
		}
		if rep.Rows != len(evs) || rep.Notifications != len(evs) || rep.Patients != patients {
			t.Fatalf("%d rows, %d notifications, %d patients; want %d, %d, %d", rep.Rows, rep.Notifications, rep.Patients, len(evs), len(evs), patients)
		}
		// Count the notifications per kind, independently of the validator.
		d := openDB(t, b)
		rows, _ := d.Rows(context.Background(), ledger.Strict)
		notes, _ := d.Notifications(context.Background(), ledger.Strict)
		kindOf := map[string]ledger.Kind{}
		for _, r := range rows {
			kindOf[r.EventID] = r.Kind
		}
		perKind := map[ledger.Kind]int{}
		perEvent := map[string]int{}
		writers := map[string]int{}
		for _, n := range notes {
			perKind[kindOf[n.EventID]]++
			perEvent[n.EventID]++
			writers[n.Writer]++
		}
		if perKind[ledger.Confirmed] != confirmed || perKind[ledger.Launched] != launched {
			t.Errorf("notifications: %d CONFIRMED, %d LAUNCHED; want %d and %d", perKind[ledger.Confirmed], perKind[ledger.Launched], confirmed, launched)
		}
		for id, n := range perEvent {
			if n != 1 {
				t.Errorf("event %s notified %d times", id, n)
			}
		}
		// The race happened: both writers took events, and copies were
		// recognised (inbox duplicate, stale event, or a lost
		// optimistic-concurrency race). Not every copy need be: a writer
		// stops once the ledger holds every event, and a copy still queued
		// then is a duplicate for the next writer.
		if sums[0].Received == 0 || sums[1].Received == 0 {
			t.Errorf("writers received %d and %d messages: want both to take part", sums[0].Received, sums[1].Received)
		}
		if sums[0].Dups+sums[1].Dups+sums[0].Conflicts+sums[1].Conflicts+sums[0].Ignored+sums[1].Ignored == 0 {
			t.Errorf("no duplicate, conflict or stale event recorded: the writers did not race")
		}
		t.Logf("notifications by writer: %v", writers)
	})
}

// The checker can fail: the incident's writer (wall-clock keys, a fail-open
// "last sequence" cache, no unique constraint) run by the same two processes
// leaves duplicate confirmations and launches, which validate reports.
func TestNaiveWriterIsCaught(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		const patients = 6
		evs, _, _ := scenario(patients)
		path := writeEvents(t, evs)
		base := append(append([]string{"write"}, b.args()...), "-events", path, "-wait-start", "-naive")
		fast := startChild(t, append(base, "-name", "aurora-2")...)
		slow := startChild(t, append(base, "-name", "aurora-7", "-stall", "200ms-300ms")...)
		fast.ready(t)
		slow.ready(t)
		for _, c := range []*child{slow, fast} {
			if _, err := c.stdin.Write([]byte("go\n")); err != nil {
				t.Fatal(err)
			}
		}
		fast.finish(t)
		slow.finish(t)

		// The stalled writer's cache reads time out and it writes every
		// event (fail open); the other writes those it sees as new. Unless
		// the fast writer were seconds late, both write most events.
		code, rep := validate(t, b, "-naive")
		if code != 1 || rep.OK() {
			t.Fatalf("validate exit %d with %d violations: want exit 1 and violations", code, len(rep.Violations))
		}
		checks := map[string]int{}
		for _, v := range rep.Violations {
			checks[v.Check]++
		}
		t.Logf("violations by check: %v", checks)
		for _, want := range []string{"duplicate_identity", "key_mismatch", "duplicate_notification"} {
			if checks[want] == 0 {
				t.Errorf("no %s violation reported", want)
			}
		}
		dupKinds := map[ledger.Kind]bool{}
		for _, v := range rep.Violations {
			if v.Check == "duplicate_identity" {
				dupKinds[v.Kind] = true
			}
		}
		if !dupKinds[ledger.Confirmed] {
			t.Errorf("no duplicate CONFIRMED reported; duplicated kinds %v", dupKinds)
		}
		if rep.Notifications <= len(evs) {
			t.Errorf("%d notifications for %d events: want duplicates", rep.Notifications, len(evs))
		}
	})
}

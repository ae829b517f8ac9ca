package admin_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// BenchmarkJournalStorage measures what a journal row costs on disk with
// payload capture off, at the default 4 KiB and at 64 KiB, for a typical
// step (a 0.5 KiB event that starts a saga, whose state keeps it) and a
// large one (16 KiB): b.N steps, then the journal's bytes (table,
// indexes and TOAST on PostgreSQL; its b-tree pages from dbstat on SQLite)
// per row. Run it with a fixed count:
//
//	go test -run '^$' -bench JournalStorage -benchtime 2000x ./admin/
func BenchmarkJournalStorage(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, size := range []int{512, 16 << 10} {
			for _, limit := range []int{-1, 0, 64 << 10} {
				b.Run(fmt.Sprintf("%s/payload=%d/limit=%d", backend, size, limit), func(b *testing.B) {
					benchJournalStorage(b, backend, size, limit)
				})
			}
		}
	}
}

func benchJournalStorage(b *testing.B, backend string, size, limit int) {
	hb := setupHistory(b, backend, limit)
	ctx := context.Background()
	// Hex of random bytes: PostgreSQL's TOAST compresses it about as well
	// as it does real JSON (a note of one repeated letter would shrink to
	// nothing). The rest of the 0.5 or 16 KiB is the event's other fields.
	raw := make([]byte, (size-60)/2)
	_, _ = rand.Read(raw)
	note := hex.EncodeToString(raw)
	b.ResetTimer()
	for i := range b.N {
		env, err := hb.e.NewEnvelope(fmt.Sprintf("open-%d", i), ticketOpened{ID: fmt.Sprintf("s-%d", i), Title: "storage", Note: note})
		if err != nil {
			b.Fatal(err)
		}
		if err := hb.e.Publish(ctx, env); err != nil {
			b.Fatal(err)
		}
	}
	bytes, rows := journalBytes(b, hb)
	for ; rows < int64(b.N); bytes, rows = journalBytes(b, hb) {
		time.Sleep(20 * time.Millisecond) // polls the journal until the engine applied every step
	}
	b.StopTimer()
	b.ReportMetric(float64(bytes)/float64(rows), "B/row")
	b.ReportMetric(float64(rows), "rows")
}

// journalBytes returns the journal's size on disk and its row count.
func journalBytes(b *testing.B, hb *historyBundle) (int64, int64) {
	ctx := context.Background()
	var bytes, rows int64
	switch st := hb.st.(type) {
	case *pgstore.Store:
		err := st.Pool().QueryRow(ctx, `SELECT pg_total_relation_size('idem_journal'), (SELECT count(*) FROM idem_journal)`).Scan(&bytes, &rows)
		if err != nil {
			b.Fatal(err)
		}
	case *sqlitestore.Store:
		db, err := sql.Open("sqlite", st.Path())
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		err = db.QueryRowContext(ctx, `SELECT (SELECT sum(pgsize) FROM dbstat WHERE name IN ('idem_journal', 'idem_journal_saga')), (SELECT count(*) FROM idem_journal)`).Scan(&bytes, &rows)
		if err != nil {
			b.Fatal(err)
		}
	}
	return bytes, rows
}

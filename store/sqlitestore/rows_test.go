package sqlitestore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
	"github.com/idemhq/idem/store/sqlitestore"
)

// EstimateRows is exact for a table that fits in one page and close for a
// larger one: a table's b-tree (the journal) and a WITHOUT ROWID table's
// (the inbox), with enough rows for a tree of more than one level.
func TestEstimateRows(t *testing.T) {
	s := openStore(t, sqlitestore.Config{})
	ctx := t.Context()
	const n = 6_000
	at := time.Now().UTC()
	c := &store.Changes{}
	for i := range n {
		k := fmt.Sprintf("key-%05d", i)
		c.Inbox = append(c.Inbox, store.InboxEntry{InboxKey: store.InboxKey{SagaType: "order", Key: k, MessageID: "m-" + k}, ProcessedAt: at})
		c.Journal = append(c.Journal, store.JournalEntry{SagaType: "order", Key: k, MessageID: "m-" + k, EventType: "E", ToState: "S", Version: 1, At: at})
	}
	c.DeadLetters = []store.DeadLetter{{ID: "dl", Reason: "r", FirstFailedAt: at, LastFailedAt: at}}
	uow, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}
	rows, err := s.EstimateRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		table string
		want  int64
	}{{readmodel.TableInbox, n}, {readmodel.TableJournal, n}} {
		if got := rows[c.table]; got < c.want*8/10 || got > c.want*12/10 {
			t.Errorf("EstimateRows()[%q] = %d, want %d ± 20%%", c.table, got, c.want)
		}
	}
	if rows[readmodel.TableDeadLetters] != 1 || rows[readmodel.TableTimers] != 0 {
		t.Errorf("EstimateRows(): dead letters %d, timers %d; want exactly 1 and 0 (one page)", rows[readmodel.TableDeadLetters], rows[readmodel.TableTimers])
	}
	t.Logf("estimates: %v", rows)
}

// BenchmarkEstimateRows compares EstimateRows over every table with an
// exact count(*) of one, on 100,000 inbox and journal rows:
//
//	go test -run '^$' -bench EstimateRows ./store/sqlitestore/
func BenchmarkEstimateRows(b *testing.B) {
	s := openStore(b, sqlitestore.Config{})
	ctx := b.Context()
	at := time.Now().UTC()
	for batch := range 10 {
		c := &store.Changes{}
		for i := range 10_000 {
			k := fmt.Sprintf("key-%d-%05d", batch, i)
			c.Inbox = append(c.Inbox, store.InboxEntry{InboxKey: store.InboxKey{SagaType: "order", Key: k, MessageID: "m-" + k}, ProcessedAt: at})
			c.Journal = append(c.Journal, store.JournalEntry{SagaType: "order", Key: k, MessageID: "m-" + k, EventType: "E", ToState: "S", Version: 1, At: at})
		}
		uow, err := s.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := uow.Commit(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("estimate-all-tables", func(b *testing.B) {
		var rows map[string]int64
		for b.Loop() {
			var err error
			if rows, err = s.EstimateRows(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(rows[readmodel.TableInbox]), "inbox-rows")
		b.ReportMetric(float64(rows[readmodel.TableJournal]), "journal-rows")
	})
	b.Run("count-inbox", func(b *testing.B) {
		for b.Loop() {
			if n, err := s.CountRows(ctx, readmodel.TableInbox, 1<<40); err != nil || n != 100_000 {
				b.Fatal(n, err)
			}
		}
	})
}

package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// A store that estimates or counts its rows (readmodel.RowEstimator,
// readmodel.RowCounter) names every kind of row, counts exactly up to the
// bound and stops there, and refuses a table it does not have.
func testRowsEstimatedAndCounted(t *testing.T, s store.Store) {
	re, estimates := s.(readmodel.RowEstimator)
	rc, counts := s.(readmodel.RowCounter)
	if !estimates && !counts {
		t.Skipf("%T implements neither readmodel.RowEstimator nor readmodel.RowCounter", s)
	}
	ctx := t.Context()
	base := now()
	var ts []store.Timer
	for i := range 30 {
		ts = append(ts, timer("order", fmt.Sprintf("k-%02d", i), "expire", fmt.Sprintf("t-%d", i), base.Add(time.Minute)))
	}
	dls := []store.DeadLetter{
		{ID: "dl-1", Envelope: envelope("dl-1", base), Reason: "r", FirstFailedAt: base, LastFailedAt: base},
		{ID: "dl-2", Envelope: envelope("dl-2", base), Reason: "r", FirstFailedAt: base, LastFailedAt: base},
	}
	commit(t, s, &store.Changes{Timers: ts, DeadLetters: dls, Inserts: []*store.Instance{newInstance("order", "k-00", base)}})
	if counts {
		for _, c := range []struct {
			table string
			limit int64
			want  int64
		}{
			{readmodel.TableTimers, 1000, 30},
			{readmodel.TableTimers, 30, 30},
			{readmodel.TableTimers, 7, 7},
			{readmodel.TableDeadLetters, 1000, 2},
			{readmodel.TableInstances, 1000, 1},
			{readmodel.TableInbox, 1000, 0},
			{readmodel.TableTimers, 0, 0},
		} {
			if n, err := rc.CountRows(ctx, c.table, c.limit); err != nil || n != c.want {
				t.Errorf("CountRows(%q, %d): got %d, %v; want %d, nil", c.table, c.limit, n, err, c.want)
			}
		}
		for _, bad := range []string{"", "idem_timers", "timers; DROP TABLE idem_timers", "\x00"} {
			if n, err := rc.CountRows(ctx, bad, 10); err == nil {
				t.Errorf("CountRows(%q): got %d, nil; want an error naming no such table", bad, n)
			}
		}
	}
	if estimates {
		rows, err := re.EstimateRows(ctx)
		if err != nil {
			t.Fatalf("EstimateRows: got error %v, want nil", err)
		}
		for _, table := range []string{readmodel.TableInstances, readmodel.TableInbox, readmodel.TableOutbox, readmodel.TableTimers, readmodel.TableJournal, readmodel.TableDeadLetters} {
			if n, ok := rows[table]; !ok || n < 0 {
				t.Errorf("EstimateRows: %q is %d (present %v), want a count of 0 or more", table, n, ok)
			}
		}
	}
}

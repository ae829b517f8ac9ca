package inspect_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
)

// stores returns a fresh store of each kind that runs without a server.
func stores(t *testing.T) map[string]store.Store {
	t.Helper()
	lite, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	mem := memstore.New(nil)
	t.Cleanup(func() { lite.Close(); mem.Close() })
	return map[string]store.Store{"sqlite": lite, "memory": mem}
}

// A saga's timers are found by its key however many timers are due before
// them: as in issue 23 (12,000 sagas each holding a timer, beyond the
// scan's 10,000), here with the scan's bound lowered to 100 and 1,200
// sagas, and the last saga's timer listed, found, rescheduled and
// cancelled.
func TestTimersOfOneSagaBeyondTheScan(t *testing.T) {
	defer inspect.SetTimerScan(100)()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			base := time.Now().UTC().Truncate(time.Microsecond)
			const n = 1_200
			var ts []store.Timer
			for i := range n {
				id := fmt.Sprintf("t-%d", i)
				ts = append(ts, store.Timer{SagaType: "purchase-order", Key: fmt.Sprintf("B-%06d", i), Name: "approval",
					DueAt: base.Add(time.Duration(i) * time.Second), Envelope: transport.Envelope{ID: id, Type: "Timeout", Body: []byte(`{}`)}})
			}
			uow, err := st.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := uow.Commit(ctx, &store.Changes{Timers: ts}); err != nil {
				t.Fatal(err)
			}
			last := store.TimerKey{SagaType: "purchase-order", Key: fmt.Sprintf("B-%06d", n-1), Name: "approval"}

			got, next, err := inspect.Timers(ctx, st, &inspect.TimerFilter{SagaType: last.SagaType, Key: last.Key})
			if err != nil || len(got) != 1 || got[0].Envelope.ID != fmt.Sprintf("t-%d", n-1) || next != "" {
				t.Fatalf("Timers of %s/%s: got %d timers, next %q, %v; want its one timer t-%d and no next page", last.SagaType, last.Key, len(got), next, err, n-1)
			}
			got, _, err = inspect.Timers(ctx, st, &inspect.TimerFilter{Key: last.Key})
			if err != nil || len(got) != 1 {
				t.Fatalf("Timers of key %s in every type: got %d timers, %v; want 1", last.Key, len(got), err)
			}
			got, _, err = inspect.Timers(ctx, st, &inspect.TimerFilter{SagaType: last.SagaType, Key: last.Key, DueBefore: base})
			if err != nil || len(got) != 0 {
				t.Fatalf("overdue timers of %s/%s: got %d, %v; want none", last.SagaType, last.Key, len(got), err)
			}
			if _, err := inspect.FindTimer(ctx, st, last); err != nil {
				t.Fatalf("FindTimer(%v): got %v, want the timer", last, err)
			}
			due := base.Add(-time.Hour)
			if _, err := inspect.RescheduleTimer(ctx, st, last, due); err != nil {
				t.Fatalf("RescheduleTimer(%v): got %v, want nil", last, err)
			}
			if tm, err := inspect.FindTimer(ctx, st, last); err != nil || !tm.DueAt.Equal(due) {
				t.Fatalf("after a reschedule: got %+v, %v; want due at %v", tm, err, due)
			}
			if err := inspect.CancelTimer(ctx, st, last); err != nil {
				t.Fatalf("CancelTimer(%v): got %v, want nil", last, err)
			}
			if _, err := inspect.FindTimer(ctx, st, last); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("FindTimer after a cancel: got %v, want store.ErrNotFound", err)
			}
		})
	}
}

// The next cursor of a page of one key's timers is accepted back: page 2
// holds the rest, and a cursor this program never printed is refused with
// ErrBadCursor (the admin API answers it 400, not 500).
func TestTimersOfOneKeyNextPage(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			base := time.Now().UTC().Truncate(time.Microsecond)
			var ts []store.Timer
			for i := range 3 {
				ts = append(ts, store.Timer{SagaType: "po", Key: "K", Name: fmt.Sprintf("n%d", i),
					DueAt: base.Add(time.Duration(i) * time.Second), Envelope: transport.Envelope{ID: fmt.Sprint(i), Type: "T", Body: []byte(`{}`)}})
			}
			uow, err := st.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := uow.Commit(ctx, &store.Changes{Timers: ts}); err != nil {
				t.Fatal(err)
			}
			for _, typ := range []string{"po", ""} {
				got, next, err := inspect.Timers(ctx, st, &inspect.TimerFilter{SagaType: typ, Key: "K", Limit: 2})
				if err != nil || len(got) != 2 || next == "" {
					t.Fatalf("page 1 of key K (type %q): got %d timers, next %q, %v; want 2 and a next cursor", typ, len(got), next, err)
				}
				got, next, err = inspect.Timers(ctx, st, &inspect.TimerFilter{SagaType: typ, Key: "K", Limit: 2, After: next})
				if err != nil || len(got) != 1 || got[0].Name != "n2" || next != "" {
					t.Fatalf("page 2 of key K (type %q): got %v, next %q, %v; want timer n2 and no next cursor", typ, got, next, err)
				}
			}
			for _, bad := range []string{"po\x00K", "<script>", "\xff", "e30"} {
				if _, _, err := inspect.Timers(ctx, st, &inspect.TimerFilter{Key: "K", After: bad}); !errors.Is(err, inspect.ErrBadCursor) {
					t.Errorf("key K after %q: got %v, want ErrBadCursor", bad, err)
				}
			}
		})
	}
}

package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
)

// seedSQLite creates a migrated SQLite store holding two instances (one
// finished, updated earlier), a timer of each, and two dead letters of
// different message types.
func seedSQLite(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.db")
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	in := func(k, state string, age time.Duration, finished bool) *store.Instance {
		i := &store.Instance{SagaType: "order", Key: k, State: state, Data: []byte(`{}`), SchemaVersion: 1, Version: 1, CreatedAt: now.Add(-age), UpdatedAt: now.Add(-age)}
		if finished {
			i.FinishedAt = i.UpdatedAt
		}
		return i
	}
	tm := func(k string, due time.Time) store.Timer {
		return store.Timer{SagaType: "order", Key: k, Name: "overdue", DueAt: due, Envelope: transport.Envelope{ID: "t-" + k, Type: "orders.PaymentOverdue", Body: []byte(`{}`)}}
	}
	dl := func(id, typ string) store.DeadLetter {
		return store.DeadLetter{ID: id, Envelope: transport.Envelope{ID: id, Type: typ, Body: []byte(`{}`)}, Reason: "permanent_error", Error: "boom", Attempts: 1, FirstFailedAt: now, LastFailedAt: now}
	}
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &store.Changes{
		Inserts:     []*store.Instance{in("a-1", "AwaitingPayment", time.Minute, false), in("a-2", "AwaitingPayment", time.Hour, false), in("b-1", "Shipped", 2*time.Hour, true)},
		Timers:      []store.Timer{tm("a-1", now.Add(-time.Minute)), tm("a-2", now.Add(time.Hour))},
		DeadLetters: []store.DeadLetter{dl("m-1", "orders.OrderPlaced"), dl("m-2", "orders.PaymentReceived")},
	}); err != nil {
		t.Fatal(err)
	}
	return "sqlite://" + path
}

func TestSagasLsStuckAndPrefix(t *testing.T) {
	t.Parallel()
	url := seedSQLite(t)
	code, out, errOut := run(t, "sagas", "ls", "--stuck", "--store", url)
	if code != 0 {
		t.Fatalf("sagas ls --stuck: exit %d, stderr %q", code, errOut)
	}
	if i, j := strings.Index(out, `"a-2"`), strings.Index(out, `"a-1"`); i < 0 || j < 0 || i > j || strings.Contains(out, "b-1") {
		t.Errorf("sagas ls --stuck: got\n%s\nwant a-2 before a-1 and no finished b-1", out)
	}
	code, out, _ = run(t, "sagas", "ls", "--prefix", "b-", "--status", "finished", "--store", url)
	if code != 0 || !strings.Contains(out, `"b-1"`) || strings.Contains(out, "a-1") {
		t.Errorf("sagas ls --prefix b- --status finished: exit %d, got\n%s", code, out)
	}
	if code, _, _ := run(t, "sagas", "ls", "--status", "nope", "--store", url); code != 2 {
		t.Errorf("sagas ls --status nope: exit %d, want 2", code)
	}
}

func TestTimersCommands(t *testing.T) {
	t.Parallel()
	url := seedSQLite(t)
	code, out, _ := run(t, "timers", "ls", "--overdue", "--store", url)
	if code != 0 || !strings.Contains(out, `"a-1"`) || strings.Contains(out, `"a-2"`) {
		t.Fatalf("timers ls --overdue: exit %d, got\n%s\nwant a-1 only", code, out)
	}
	if code, out, errOut := run(t, "timers", "reschedule", "order", "a-1", "overdue", "--in", "2h", "--store", url); code != 0 || !strings.Contains(out, "now due") {
		t.Fatalf("timers reschedule: exit %d, out %q, err %q", code, out, errOut)
	}
	if code, out, _ := run(t, "timers", "ls", "--overdue", "--store", url); code != 0 || strings.Contains(out, `"a-1"`) {
		t.Errorf("after reschedule, timers ls --overdue: exit %d, got\n%s\nwant no a-1", code, out)
	}
	if code, _, errOut := run(t, "timers", "cancel", "order", "a-2", "overdue", "--store", url); code != 0 {
		t.Fatalf("timers cancel: exit %d, err %q", code, errOut)
	}
	if code, _, errOut := run(t, "timers", "cancel", "order", "a-2", "overdue", "--store", url); code != 1 || !strings.Contains(errOut, "no timer") {
		t.Errorf("timers cancel twice: exit %d, err %q; want 1 and no timer", code, errOut)
	}
	if code, out, _ := run(t, "timers", "ls", "--store", url); code != 0 || strings.Contains(out, `"a-2"`) || !strings.Contains(out, `"a-1"`) {
		t.Errorf("timers ls after cancel: exit %d, got\n%s", code, out)
	}
}

func TestDLQReplayByTypeDryRun(t *testing.T) {
	t.Parallel()
	url := seedSQLite(t)
	code, out, errOut := run(t, "dlq", "replay", "--message-type", "orders.OrderPlaced", "--dry-run", "--store", url)
	if code != 0 || !strings.Contains(out, "would replay m-1") || strings.Contains(out, "m-2") || !strings.Contains(out, "would replay 1 dead letter") {
		t.Fatalf("dlq replay --message-type --dry-run: exit %d, out %q, err %q", code, out, errOut)
	}
	if code, out, _ := run(t, "dlq", "ls", "--store", url); code != 0 || !strings.Contains(out, "m-1") {
		t.Fatalf("after a dry run, dlq ls: exit %d, out %q; want m-1 still there", code, out)
	}
	code, out, errOut = run(t, "dlq", "replay", "--reason", "permanent_error", "--message-type", "orders.OrderPlaced", "--store", url)
	if code != 0 || !strings.Contains(out, "re-queued 1 dead letter") {
		t.Fatalf("dlq replay --reason --message-type: exit %d, out %q, err %q", code, out, errOut)
	}
	// Kept, with the replay pending in its history.
	if code, out, _ := run(t, "dlq", "show", "m-1", "--store", url); code != 0 || !strings.Contains(out, "is pending") {
		t.Errorf("after replay, dlq show m-1: exit %d, out %q; want its replay pending", code, out)
	}
}

// idem sagas end ends an active saga with its timers, refuses a finished
// one and a missing reason, and the journal names the reason.
func TestSagasEnd(t *testing.T) {
	t.Parallel()
	url := seedSQLite(t)
	if code, _, errOut := run(t, "sagas", "end", "order", "a-1", "--store", url); code != 2 || !strings.Contains(errOut, "reason is required") {
		t.Errorf("sagas end without --reason: exit %d, stderr %q; want 2 and the reason asked for", code, errOut)
	}
	if code, _, errOut := run(t, "sagas", "end", "order", "b-1", "--reason", "r", "--store", url); code != 1 || !strings.Contains(errOut, "finished already") {
		t.Errorf("sagas end of a finished saga: exit %d, stderr %q; want 1 and finished already", code, errOut)
	}
	if code, _, errOut := run(t, "sagas", "end", "order", "a-1", "--reason", "r", "--dry-run", "--store", url); code != 2 || !strings.Contains(errOut, "names one saga") {
		t.Errorf("sagas end TYPE KEY --dry-run: exit %d, stderr %q; want 2, refused", code, errOut)
	}
	code, out, errOut := run(t, "sagas", "end", "order", "a-1", "--reason", "customer called", "--store", url)
	if code != 0 || !strings.Contains(out, "ended saga order/\"a-1\"") {
		t.Fatalf("sagas end: exit %d, out %q, stderr %q", code, out, errOut)
	}
	code, out, _ = run(t, "sagas", "show", "order", "a-1", "--json", "--store", url)
	var shown struct {
		State   string               `json:"state"`
		Journal []admin.HistoryEntry `json:"journal"`
	}
	if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil || shown.State != "idem.ended" || len(shown.Journal) != 1 ||
		!strings.Contains(string(shown.Journal[0].Payload), "customer called") || !strings.HasPrefix(shown.Journal[0].Actor, "cli") {
		t.Errorf("sagas show after the end: exit %d, %v, %s; want state idem.ended and the reason and actor in the journal", code, err, out)
	}
	if code, out, _ := run(t, "timers", "ls", "--key", "a-1", "--store", url); code != 0 || strings.Contains(out, "overdue") {
		t.Errorf("timers of a-1 after the end: exit %d, %q; want none", code, out)
	}
}

// idem sagas end by filter counts first, and ends only the set counted.
func TestSagasEndByFilter(t *testing.T) {
	t.Parallel()
	url := seedSQLite(t)
	if code, _, errOut := run(t, "sagas", "end", "--saga-type", "order", "--reason", "r", "--store", url); code != 2 || !strings.Contains(errOut, "--dry-run") {
		t.Errorf("sagas end by filter without --dry-run or --yes: exit %d, %q; want 2", code, errOut)
	}
	code, out, errOut := run(t, "sagas", "end", "--saga-type", "order", "--prefix", "a-", "--reason", "r", "--dry-run", "--store", url)
	dry := out
	_, digest, ok := strings.Cut(strings.TrimSpace(out), " --yes --digest ")
	ok = ok && strings.HasPrefix(out, "2 sagas selected; to end exactly these: idem sagas end ")
	if code != 0 || !ok {
		t.Fatalf("sagas end --dry-run: exit %d, out %q, stderr %q; want 2 sagas and a digest", code, out, errOut)
	}
	if code, _, errOut := run(t, "sagas", "end", "--saga-type", "order", "--prefix", "a-1", "--reason", "r", "--yes", "--digest", digest, "--store", url); code != 1 || !strings.Contains(errOut, "changed since") {
		t.Errorf("a digest used with another filter: exit %d, %q; want 1, the set changed", code, errOut)
	}
	// The command the dry run printed ends exactly that set, as printed.
	code, out, errOut = run(t, hint(t, dry, "to end exactly these: ")...)
	if code != 0 || !strings.Contains(out, "ended 2 sagas") {
		t.Errorf("sagas end as the dry run printed it: exit %d, out %q, stderr %q; want 2 ended", code, out, errOut)
	}
}

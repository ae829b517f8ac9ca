package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

func TestSagasLsAndShow(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	url := "sqlite://" + path
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in := &store.Instance{SagaType: "order", Key: "o-1", State: "Paid", Data: []byte(`{"total":3}`), SchemaVersion: 1, Version: 1, CreatedAt: now, UpdatedAt: now}
	j := store.JournalEntry{SagaType: "order", Key: "o-1", MessageID: "m-1", EventType: "orders.Paid", FromState: "Initial", ToState: "Paid", Version: 1, At: now}
	if err := uow.Commit(ctx, &store.Changes{Inserts: []*store.Instance{in}, Journal: []store.JournalEntry{j}}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	code, out, errOut := run(t, "sagas", "ls", "--store", url)
	if code != 0 || !strings.Contains(out, "order") || !strings.Contains(out, `"o-1"`) || !strings.Contains(out, "Paid") {
		t.Fatalf("sagas ls: exit %d, out %q, err %q", code, out, errOut)
	}
	code, out, _ = run(t, "sagas", "ls", "--store", url, "--saga-type", "order", "--json")
	var list []instanceJSON
	var data struct{ Total int }
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || json.Unmarshal(list[0].Data, &data) != nil || data.Total != 3 {
		t.Fatalf("sagas ls --json: exit %d, out %q", code, out)
	}
	code, out, _ = run(t, "sagas", "show", "order", "o-1", "--store", url)
	if code != 0 || !strings.Contains(out, `"total": 3`) || !strings.Contains(out, "orders.Paid") {
		t.Fatalf("sagas show: exit %d, out %q", code, out)
	}
	code, out, _ = run(t, "sagas", "show", "order", "a-1", "--store", seedKeys(t))
	for _, want := range []string{"\nState:", "\nTimers (name: message ID):\n  overdue:  t-order/a-1\n", "\nData (7 bytes, JSON):\n  {\n    \"n\": 1\n  }\n", "\nJournal: empty\n"} {
		if code != 0 || !strings.HasPrefix(out, "Saga:") || !strings.Contains(out, want) || strings.Contains(out, "map[") {
			t.Errorf("sagas show: exit %d, out %q; want dlq show's layout with %q", code, out, want)
		}
	}
	code, _, errOut = run(t, "sagas", "show", "order", "nope", "--store", url)
	if code != 1 || !strings.Contains(errOut, "no saga order") {
		t.Fatalf("sagas show missing: exit %d, err %q", code, errOut)
	}
}

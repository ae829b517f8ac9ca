package cli

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
)

// The operations commands work on the embedded store too.
func TestOpsOnSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	url := "sqlite://" + path

	if code, _, errOut := run(t, "dlq", "ls", "--store", url); code != 2 || !strings.Contains(errOut, "idem migrate") {
		t.Fatalf("dlq ls before migrate: exit %d, stderr %q; want 2 and a hint to run idem migrate", code, errOut)
	}
	code, out, errOut := run(t, "migrate", "--store", url)
	if code != 0 || !strings.Contains(out, "schema version "+strconv.Itoa(sqlitestore.SchemaVersion())) {
		t.Fatalf("migrate: exit %d, out %q, err %q", code, out, errOut)
	}

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
	dl := store.DeadLetter{ID: "m-1", Envelope: transport.Envelope{ID: "m-1", Type: "orders.OrderPlaced", Body: []byte(`{`)},
		Reason: "malformed_body", Error: "unexpected end of JSON input", Attempts: 1, FirstFailedAt: now, LastFailedAt: now}
	if err := uow.Commit(ctx, &store.Changes{DeadLetters: []store.DeadLetter{dl}}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	if code, out, _ := run(t, "dlq", "ls", "--store", url); code != 0 || !strings.Contains(out, "m-1") || !strings.Contains(out, "malformed_body") {
		t.Fatalf("dlq ls: exit %d, out %q", code, out)
	}
	if code, out, errOut := run(t, "dlq", "replay", "m-1", "--store", url); code != 0 {
		t.Fatalf("dlq replay: exit %d, out %q, err %q", code, out, errOut)
	}
	st, err = sqlitestore.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ds, err := st.Receive(rctx, 10)
	if err != nil || len(ds) != 1 || ds[0].Envelope.ID != "m-1" {
		t.Fatalf("queue after replay: %v, %v; want m-1", ds, err)
	}
	if code, _, errOut := run(t, "dlq", "ls", "--store", "sqlite://"); code != 2 || !strings.Contains(errOut, "names no file") {
		t.Errorf("sqlite:// without a path: exit %d, stderr %q", code, errOut)
	}
}

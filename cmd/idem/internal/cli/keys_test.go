package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
)

const (
	nfcKey = "M\u00fcller-1"  // as the engine stores it
	nfdKey = "Mu\u0308ller-1" // the same key decomposed
)

// seedKeys creates a SQLite store with instances of two saga types, each
// with a timer, one of them keyed Müller-1.
func seedKeys(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.db")
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	var c store.Changes
	for i, k := range []string{"order/a-1", "order/a-2", "order/a-3", "order/" + nfcKey, "po/a-1", "po/b-1"} {
		typ, key, _ := strings.Cut(k, "/")
		c.Inserts = append(c.Inserts, &store.Instance{SagaType: typ, Key: key, State: "Open", Data: []byte(`{"n":1}`), SchemaVersion: 1, Version: 1,
			CreatedAt: now, UpdatedAt: now.Add(time.Duration(i) * time.Second), Timers: map[string]string{"overdue": "t-" + k}})
		c.Timers = append(c.Timers, store.Timer{SagaType: typ, Key: key, Name: "overdue", DueAt: now.Add(time.Duration(i) * time.Minute),
			Envelope: transport.Envelope{ID: "t-" + k, Type: "orders.PaymentOverdue", Body: []byte(`{"order":"` + key + `"}`)}})
	}
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &c); err != nil {
		t.Fatal(err)
	}
	return "sqlite://" + path
}

// Every command that takes a saga key or a key prefix accepts every
// spelling the engine accepts.
func TestCommandsTakeKeysInAnyUnicodeSpelling(t *testing.T) {
	t.Parallel()
	url := seedKeys(t)
	code, out, errOut := run(t, "sagas", "show", "order", nfdKey, "--store", url)
	if code != 0 || !strings.Contains(out, nfcKey) {
		t.Errorf("sagas show order <NFD>: exit %d, out %q, err %q", code, out, errOut)
	}
	code, out, errOut = run(t, "sagas", "ls", "--prefix", "Mu\u0308", "--store", url)
	if code != 0 || !strings.Contains(out, nfcKey) {
		t.Errorf("sagas ls --prefix Mü (NFD): exit %d, out %q, err %q", code, out, errOut)
	}
	code, out, errOut = run(t, "sagas", "ls", "--saga-type", "order", "--prefix", " Mu\u0308l", "--store", url)
	if code != 0 || !strings.Contains(out, nfcKey) {
		t.Errorf("sagas ls --saga-type order --prefix ' Mül' (NFD): exit %d, out %q, err %q", code, out, errOut)
	}
	for _, args := range [][]string{{"--key", nfdKey}, {"--saga-type", "order", "--key", nfdKey}} {
		code, out, errOut = run(t, append([]string{"timers", "ls", "--store", url}, args...)...)
		if code != 0 || !strings.Contains(out, nfcKey) {
			t.Errorf("timers ls %q: exit %d, out %q, err %q", args, code, out, errOut)
		}
	}
	if code, out, errOut := run(t, "timers", "reschedule", "order", nfdKey, "overdue", "--in", "1h", "--store", url); code != 0 {
		t.Errorf("timers reschedule <NFD>: exit %d, out %q, err %q", code, out, errOut)
	}
	if code, out, errOut := run(t, "timers", "cancel", "order", nfdKey, "overdue", "--store", url); code != 0 {
		t.Errorf("timers cancel <NFD>: exit %d, out %q, err %q", code, out, errOut)
	}
	if code, _, errOut := run(t, "sagas", "show", "order", "a\x00b", "--store", url); code != 2 || !strings.Contains(errOut, "not a valid key") {
		t.Errorf("sagas show with a NUL key: exit %d, err %q; want usage error 2", code, errOut)
	}
}

var cursorHint = regexp.MustCompile(`^more may follow: idem .* --after (\S+)\n$`)

// page runs a listing and returns its keys and its next cursor ("" when
// it prints none); the cursor must be a shell-safe token.
func page(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	code, out, errOut := run(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("%q: exit %d, err %q", args, code, errOut)
	}
	var rows []struct {
		SagaType string `json:"saga_type"`
		Key      string `json:"key"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%q: %v in %q", args, err, out)
	}
	var keys []string
	for _, r := range rows {
		keys = append(keys, r.SagaType+"/"+r.Key)
	}
	if errOut == "" {
		return keys, ""
	}
	m := cursorHint.FindStringSubmatch(errOut)
	if m == nil || !regexp.MustCompile(`^[A-Za-z0-9_-]+$`).MatchString(m[1]) {
		t.Fatalf("%q: stderr %q is not a hint with a shell-safe cursor", args, errOut)
	}
	return keys, m[1]
}

// Next-page cursors are shell-safe tokens that lead through every page;
// a malformed one is a usage error naming it.
func TestCursorsCanBeTyped(t *testing.T) {
	t.Parallel()
	url := seedKeys(t)
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"sagas", "ls"}, 6},
		{[]string{"sagas", "ls", "--saga-type", "order"}, 4},
		{[]string{"sagas", "ls", "--saga-type", "order", "--prefix", "a-"}, 3},
		{[]string{"sagas", "ls", "--prefix", "a-"}, 4},
		{[]string{"sagas", "ls", "--stuck"}, 6},
		{[]string{"timers", "ls"}, 6},
		{[]string{"timers", "ls", "--saga-type", "po"}, 2},
	} {
		var all []string
		after := ""
		for range 10 {
			args := append(tc.args, "--store", url, "--limit", "2")
			if after != "" {
				args = append(args, "--after", after)
			}
			keys, next := page(t, args...)
			all = append(all, keys...)
			if after = next; after == "" {
				break
			}
		}
		seen := map[string]bool{}
		for _, k := range all {
			seen[k] = true
		}
		if len(all) != tc.want || len(seen) != tc.want {
			t.Errorf("%q: paged through %q, want %d distinct", tc.args, all, tc.want)
		}
	}
	for _, args := range [][]string{{"sagas", "ls"}, {"sagas", "ls", "--saga-type", "order"}, {"sagas", "ls", "--prefix", "a"}, {"timers", "ls"}} {
		for _, bad := range []string{"order\x00a-1", "!!", "bm90IGpzb24"} {
			code, _, errOut := run(t, append(args, "--store", url, "--after", bad)...)
			if code != 2 || !strings.Contains(errOut, "--after") || !strings.Contains(errOut, "cursor") {
				t.Errorf("%q --after %q: exit %d, err %q; want usage error 2 naming the cursor", args, bad, code, errOut)
			}
		}
	}
}

// timers ls --key pages too: the next cursor it prints is accepted back,
// and a malformed one is a usage error, as without --key.
func TestTimersOfOneKeyPage(t *testing.T) {
	t.Parallel()
	url := seedKeys(t)
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, strings.TrimPrefix(url, "sqlite://"), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	var c store.Changes
	for _, name := range []string{"remind", "escalate"} {
		c.Timers = append(c.Timers, store.Timer{SagaType: "po", Key: "a-1", Name: name, DueAt: now.Add(time.Hour),
			Envelope: transport.Envelope{ID: "t-" + name, Type: "orders.PaymentOverdue", Body: []byte(`{}`)}})
	}
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &c); err != nil {
		t.Fatal(err)
	}
	st.Close()

	args := []string{"timers", "ls", "--saga-type", "po", "--key", "a-1", "--store", url, "--limit", "2"}
	keys, next := page(t, args...)
	if len(keys) != 2 || next == "" {
		t.Fatalf("%q: got %q, next %q; want 2 timers and a next cursor", args, keys, next)
	}
	if keys, next = page(t, append(args, "--after", next)...); len(keys) != 1 || next != "" {
		t.Errorf("%q page 2: got %q, next %q; want the third timer and no next cursor", args, keys, next)
	}
	for _, bad := range []string{"po\x00a-1", "!!", "bm90IGpzb24"} {
		code, _, errOut := run(t, append(args, "--after", bad)...)
		if code != 2 || !strings.Contains(errOut, "--after") || !strings.Contains(errOut, "cursor") {
			t.Errorf("%q --after %q: exit %d, err %q; want usage error 2 naming the cursor", args, bad, code, errOut)
		}
	}
}

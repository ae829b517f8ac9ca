package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
)

// seedTyped is a migrated SQLite store with dead letters of two saga
// types and three message types, sagas of two types, timers and schedules:
// enough for every list command to need two pages at --limit 1.
func seedTyped(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.db")
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	dl := func(id, sagaType, msgType string) store.DeadLetter {
		return store.DeadLetter{ID: id, SagaType: sagaType, Key: "k-" + id, Envelope: transport.Envelope{ID: id, Type: msgType, Body: []byte(`{}`)},
			Reason: "permanent_error", Error: "boom", Attempts: 1, FirstFailedAt: now, LastFailedAt: now}
	}
	in := func(typ, k string) *store.Instance {
		return &store.Instance{SagaType: typ, Key: k, State: "Waiting", Data: []byte(`{}`), SchemaVersion: 1, Version: 1, CreatedAt: now, UpdatedAt: now}
	}
	po := in("purchase-order", "po-1") // README's example of --attr
	po.Attributes = map[string]string{"supplier": "Müller", "region": "eu"}
	tm := func(k string) store.Timer {
		return store.Timer{SagaType: "searchimport", Key: k, Name: "deadline", DueAt: now.Add(time.Hour), Envelope: transport.Envelope{ID: "t-" + k, Type: "searchimport.Deadline", Body: []byte(`{}`)}}
	}
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &store.Changes{
		Inserts: []*store.Instance{in("searchimport", "s-1"), in("searchimport", "s-2"), in("searchimport", "s-3"), in("order", "o-1"), po},
		Timers:  []store.Timer{tm("s-1"), tm("s-2"), tm("s-3")},
		DeadLetters: []store.DeadLetter{
			dl("bad-key-1", "searchimport", "searchimport.SearchUploadDeleted"), dl("bad-key-2", "searchimport", "searchimport.SearchUploadDeleted"),
			dl("bad-key-3", "searchimport", "searchimport.Other"), dl("bad-key-4", "order", "orders.OrderPlaced"),
		},
	}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a-hourly", "b-nightly", "c-weekly"} {
		if err := st.SaveSchedule(ctx, &store.Schedule{Name: n, Spec: "0 2 * * *", Missed: store.MissedFireOnce,
			Envelope: transport.Envelope{Type: "report.Due", Body: []byte(`{"report":"` + n + `"}`)}, NextDue: now.Add(time.Hour), UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	return "sqlite://" + path
}

// --saga-type is the saga type and --message-type the message type on
// every command; --type, which meant one on some and the other on
// others, is refused with a message naming both (issue 31, item 13).
func TestTypeFlagsOneNameOneMeaning(t *testing.T) {
	t.Parallel()
	url := seedTyped(t)
	// dlq ls by the value of its own MESSAGE TYPE column.
	code, out, errOut := run(t, "dlq", "ls", "--message-type", "searchimport.SearchUploadDeleted", "--store", url)
	if code != 0 || !strings.Contains(out, "bad-key-1") || !strings.Contains(out, "bad-key-2") || strings.Contains(out, "bad-key-3") || !strings.Contains(out, "MESSAGE TYPE") {
		t.Errorf("dlq ls --message-type: exit %d, out %q, err %q; want bad-key-1 and 2 under a MESSAGE TYPE column", code, out, errOut)
	}
	code, out, errOut = run(t, "dlq", "ls", "--saga-type", "order", "--store", url)
	if code != 0 || !strings.Contains(out, "bad-key-4") || strings.Contains(out, "bad-key-1") {
		t.Errorf("dlq ls --saga-type order: exit %d, out %q, err %q; want bad-key-4 only", code, out, errOut)
	}
	code, out, errOut = run(t, "dlq", "replay", "--message-type", "searchimport.Other", "--dry-run", "--store", url)
	if code != 0 || !strings.Contains(out, "would replay bad-key-3") || strings.Contains(out, "bad-key-1") {
		t.Errorf("dlq replay --message-type --dry-run: exit %d, out %q, err %q; want bad-key-3 only", code, out, errOut)
	}
	for _, args := range [][]string{
		{"dlq", "ls"}, {"dlq", "replay", "--all", "--dry-run"}, {"dlq", "purge", "--all", "--dry-run"}, {"dlq", "groups"},
		{"dlq", "archive", "--all", "--dry-run"}, {"dlq", "restore", "--all", "--dry-run"},
		{"sagas", "ls"}, {"sagas", "end", "--reason", "r", "--dry-run"}, {"timers", "ls"}, {"retries", "ls"},
	} {
		code, out, errOut := run(t, append(args, "--type", "order", "--store", url)...)
		if code != 2 || !strings.Contains(errOut, "--type is ambiguous") || !strings.Contains(errOut, "--saga-type order") {
			t.Errorf("%s --type order: exit %d, out %q, err %q; want 2 and a message naming --saga-type", strings.Join(args, " "), code, out, errOut)
		}
		code, out, _ = run(t, append(args[:2:2], "--help")...)
		if code != 0 || strings.Contains(out, "--type ") || !strings.Contains(out, "--saga-type") {
			t.Errorf("%s --help: exit %d; want --saga-type shown and no --type:\n%s", strings.Join(args[:2], " "), code, out)
		}
	}
	code, _, errOut = run(t, "retries", "retry", "--type", "order", "--dry-run", "--api", "http://127.0.0.1:1")
	if code != 2 || !strings.Contains(errOut, "--saga-type order for the saga type, or --message-type order for the message type") {
		t.Errorf("retries retry --type: exit %d, err %q; want 2 naming both flags", code, errOut)
	}
}

// hint returns the command line a hint line on stderr holds, after
// prefix, as arguments for run (without "idem"), with single-quoted words
// unquoted.
func hint(t *testing.T, text, prefix string) []string {
	t.Helper()
	_, line, ok := strings.Cut(text, prefix)
	if !ok {
		t.Fatalf("no hint %q in %q", prefix, text)
	}
	line, _, _ = strings.Cut(line, "\n")
	line, _, _ = strings.Cut(line, " #") // a shell comment
	words := strings.Fields(strings.TrimSpace(line))
	if len(words) == 0 || words[0] != "idem" {
		t.Fatalf("hint %q does not start with idem", line)
	}
	for i, w := range words {
		words[i] = strings.Trim(w, `'"`)
	}
	return words[1:]
}

// The paging hints repeat the user's flags, so that they run as printed
// and read the same store with the same filters (issue 31, item 14).
func TestPagingHintsRunAsPrinted(t *testing.T) {
	t.Parallel()
	url := seedTyped(t)
	for _, tc := range []struct {
		args        []string
		first, next string // a row of the first page, and of the next
	}{
		{[]string{"dlq", "ls", "--saga-type", "searchimport", "--limit", "2"}, "bad-key-1", "bad-key-3"},
		{[]string{"dlq", "ls", "--message-type", "searchimport.SearchUploadDeleted", "--limit", "1"}, "bad-key-1", "bad-key-2"},
		{[]string{"sagas", "ls", "--saga-type", "searchimport", "--limit", "2"}, `"s-1"`, `"s-3"`},
		{[]string{"timers", "ls", "--saga-type", "searchimport", "--limit", "2"}, `"s-1"`, `"s-3"`},
		{[]string{"schedules", "ls", "--limit", "2"}, "a-hourly", "c-weekly"},
	} {
		args := append(tc.args, "--store", url)
		code, out, errOut := run(t, args...)
		if code != 0 || !strings.Contains(out, tc.first) || strings.Contains(out, tc.next) {
			t.Errorf("%s: exit %d, out %q, err %q; want %s and not %s", strings.Join(tc.args, " "), code, out, errOut, tc.first, tc.next)
			continue
		}
		next := hint(t, errOut, "more may follow: ")
		for _, want := range [][]string{{"--store", url}, tc.args[2:4]} {
			if !strings.Contains(strings.Join(next, " "), strings.Join(want, " ")) {
				t.Errorf("%s: hint %q lacks %q", strings.Join(tc.args, " "), next, want)
			}
		}
		code, out, errOut = run(t, next...)
		if code != 0 || !strings.Contains(out, tc.next) || strings.Contains(out, tc.first) || strings.Contains(out, "bad-key-4") || strings.Contains(out, `"o-1"`) {
			t.Errorf("%s, as printed: exit %d, out %q, err %q; want the next page, %s, with the same filter", next, code, out, errOut, tc.next)
		}
	}
}

// The --as-of hint of a dry run repeats the store and the filters: run
// as printed, it acts on what the dry run counted (issue 31, item 14).
func TestAsOfHintRunsAsPrinted(t *testing.T) {
	t.Parallel()
	url := seedTyped(t)
	code, out, errOut := run(t, "dlq", "purge", "--all", "--saga-type", "searchimport", "--older-than", "1ns", "--dry-run", "--store", url)
	if code != 0 || !strings.Contains(out, "would delete 3 dead letters") {
		t.Fatalf("purge --dry-run: exit %d, out %q, err %q", code, out, errOut)
	}
	cmd := hint(t, out, "since: ")
	line := strings.Join(cmd, " ")
	for _, want := range []string{"--store " + url, "--saga-type searchimport", "--failed-before", "--as-of", "--all --yes"} {
		if !strings.Contains(line, want) {
			t.Errorf("purge hint %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "--older-than") || strings.Contains(line, "--dry-run") {
		t.Errorf("purge hint %q repeats --older-than or --dry-run", line)
	}
	code, out, errOut = run(t, cmd...)
	if code != 0 || !strings.Contains(out, "deleted 3 dead letters") {
		t.Errorf("purge as printed: exit %d, out %q, err %q; want 3 deleted", code, out, errOut)
	}
	code, out, _ = run(t, "dlq", "ls", "--store", url)
	if code != 0 || !strings.Contains(out, "bad-key-4") || strings.Contains(out, "bad-key-1") {
		t.Errorf("dlq ls after the purge: %q; want bad-key-4 alone", out)
	}

	url = seedTyped(t)
	code, out, errOut = run(t, "dlq", "replay", "--message-type", "searchimport.Other", "--dry-run", "--store", url)
	if code != 0 {
		t.Fatalf("replay --dry-run: exit %d, out %q, err %q", code, out, errOut)
	}
	cmd = hint(t, out, "since: ")
	code, out, errOut = run(t, cmd...)
	if code != 0 || !strings.Contains(out, "re-queued bad-key-3") || strings.Contains(out, "bad-key-1") {
		t.Errorf("replay as printed (%q): exit %d, out %q, err %q; want bad-key-3 alone", cmd, code, out, errOut)
	}
}

// A hint never prints a password: it reads the URL from IDEM_STORE or
// IDEM_TRANSPORT, and says so (issue 31, item 14).
func TestHintHidesPasswords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", "postgres://u:s3cret@db:5432/idem", "--saga-type", "x y"}, `idem dlq ls --saga-type 'x y' --store "$IDEM_STORE" --after k`},
		{[]string{"--store", "postgres://db/idem?password=s3cret"}, `idem dlq ls --store "$IDEM_STORE" --after k`},
		{[]string{"--store", "host=db password=s3cret"}, `idem dlq ls --store "$IDEM_STORE" --after k`},
		{[]string{"--store", "postgres://u@db/idem?pass%77ord=s3cret"}, `idem dlq ls --store "$IDEM_STORE" --after k`},
		{[]string{"--store", "postgres://u@db/idem?PASSWORD=s3cret"}, `idem dlq ls --store "$IDEM_STORE" --after k`},
		{[]string{"--store", "postgres://u@db/idem", "--json", "--schema", "s"}, `idem dlq ls --json --schema s --store postgres://u@db/idem --after k`},
	} {
		root := newRoot(nil, nil)
		cmd, rest, err := root.Find([]string{"dlq", "ls"})
		if err != nil || len(rest) != 0 {
			t.Fatal(err, rest)
		}
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		got := rerun(cmd, []string{"after"}, "--after", "k")
		line, note, _ := strings.Cut(got, "\n")
		if line != tc.want || strings.Contains(got, "s3cret") {
			t.Errorf("rerun %q: %q; want %q and no password", tc.args, got, tc.want)
		}
		if strings.Contains(line, "IDEM_STORE") && !strings.Contains(note, "set IDEM_STORE") {
			t.Errorf("rerun %q: note %q; want it to say to set IDEM_STORE", tc.args, note)
		}
	}
	for _, tr := range []string{"nats://t0ken@nats:4222", "amqp://u:s3cret@mq:5672/", "redis://:s3cret@redis:6379/0"} {
		cmd, _, err := newRoot(nil, nil).Find([]string{"dlq", "replay"})
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags([]string{"--transport", tr, "--all", "--dry-run"}); err != nil {
			t.Fatal(err)
		}
		got := asOfHint(cmd, &selection{asOf: "9"})
		if strings.Contains(got, "t0ken") || strings.Contains(got, "s3cret") || !strings.Contains(got, `--transport "$IDEM_TRANSPORT" --all --as-of 9`) || !strings.Contains(got, "set IDEM_TRANSPORT") {
			t.Errorf("replay --transport %s: hint %q; want the transport from IDEM_TRANSPORT, and no secret", tr, got)
		}
	}
}

// --limit is checked one way on every command: a whole number from 1 to
// 1000, or exit 2 saying so (issue 31, item 15).
func TestLimitOneRule(t *testing.T) {
	t.Parallel()
	url := seedTyped(t)
	for _, cmd := range [][]string{{"dlq", "ls"}, {"dlq", "groups"}, {"sagas", "ls"}, {"timers", "ls"}, {"schedules", "ls"}, {"retries", "ls"}, {"replicas", "ls"}} {
		for _, n := range []string{"0", "-5", "1001", "x"} {
			code, out, errOut := run(t, append(cmd, "--limit", n, "--store", url)...)
			if code != 2 || out != "" || !strings.Contains(errOut, "--limit takes a whole number from 1 to 1000") {
				t.Errorf("%s --limit %s: exit %d, out %q, err %q; want 2 and the rule", strings.Join(cmd, " "), n, code, out, errOut)
			}
		}
		if code, _, errOut := run(t, append(cmd, "--limit", "1000", "--store", url)...); code != 0 {
			t.Errorf("%s --limit 1000: exit %d, err %q; want 0", strings.Join(cmd, " "), code, errOut)
		}
	}
}

// An unmigrated store gets one hint, for the command line: no advice for
// Go callers (issue 31, item 16).
func TestUnmigratedStoreOneHint(t *testing.T) {
	t.Parallel()
	url := "sqlite://" + filepath.Join(t.TempDir(), "none.db")
	code, _, errOut := run(t, "sagas", "ls", "--store", url)
	if code != 2 || strings.Count(errOut, "idem migrate") != 1 || strings.Contains(errOut, "Config.") || !strings.Contains(errOut, "idem migrate --store "+url) {
		t.Errorf("sagas ls on a missing database: exit %d, err %q; want 2 and one hint: idem migrate --store %s", code, errOut, url)
	}
}

func TestUnmigratedPostgresHintNamesTheSchema(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	code, _, errOut := b.run("dlq", "replay", "--all", "--dry-run")
	want := "idem migrate --store " + shellWord(redactURL(b.url)) + " --schema " + b.schema + ", or pass --migrate"
	if holdsSecret(b.url) {
		want = `idem migrate --store "$IDEM_STORE" --schema ` + b.schema + ", or pass --migrate"
	}
	if code != 2 || strings.Count(errOut, "idem migrate") != 1 || strings.Contains(errOut, "Config.") || !strings.Contains(errOut, want) {
		t.Errorf("replay on an empty schema: exit %d, err %q; want 2 and one hint: %s", code, errOut, want)
	}
}

// sagas ls of a saga type the store has never held says so, exit 1
// (issue 31, item 17).
func TestSagasLsUnknownType(t *testing.T) {
	t.Parallel()
	url := seedTyped(t)
	code, out, errOut := run(t, "sagas", "ls", "--saga-type", "nosuch", "--store", url)
	if code != 1 || !strings.Contains(errOut, `no saga of type "nosuch"`) || !strings.Contains(errOut, "order, purchase-order, searchimport") {
		t.Errorf("sagas ls --saga-type nosuch: exit %d, out %q, err %q; want 1, and the types the store holds", code, out, errOut)
	}
	code, out, errOut = run(t, "sagas", "ls", "--saga-type", "order", "--state", "Nowhere", "--store", url)
	if code != 0 || !strings.Contains(out, "no sagas") {
		t.Errorf("sagas ls of a known type in an empty state: exit %d, out %q, err %q; want 0, no sagas", code, out, errOut)
	}
}

// A refused connection means the event was not sent: say so, and name
// the address once (issue 31, item 17).
func TestSagasSendRefusedIsNotSent(t *testing.T) {
	t.Parallel()
	addr := "http://" + freeAddr(t)
	code, _, errOut := run(t, "sagas", "send", "order", "o-1", "--event", "orders.Paid", "--body", `{}`, "--api", addr)
	if code != 1 || strings.Contains(errOut, "may have been sent") || !strings.Contains(errOut, "not sent") || strings.Count(errOut, addr) != 1 {
		t.Errorf("sagas send to a closed port: exit %d, err %q; want 1, not sent, and the address once", code, errOut)
	}
}

// schedules ls --json gives a JSON body as JSON, like timers ls --json
// (issue 31, item 17).
func TestSchedulesJSONBody(t *testing.T) {
	t.Parallel()
	url := seedTyped(t)
	code, out, errOut := run(t, "schedules", "ls", "--json", "--store", url)
	var list []struct {
		Name     string `json:"name"`
		Envelope struct {
			Body         json.RawMessage `json:"body"`
			BodyEncoding string          `json:"body_encoding"`
		} `json:"envelope"`
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 3 {
		t.Fatalf("schedules ls --json: exit %d, %v, out %q, err %q", code, err, out, errOut)
	}
	var compact bytes.Buffer
	if b := list[0].Envelope; json.Compact(&compact, b.Body) != nil || compact.String() != `{"report":"a-hourly"}` || b.BodyEncoding != "json" {
		t.Errorf("schedules ls --json: body %s (%s); want the JSON itself, body_encoding json", b.Body, b.BodyEncoding)
	}
}

// "List them with ..." hints name the store they were given (issue 31,
// item 14).
func TestNotFoundHintsNameTheStore(t *testing.T) {
	t.Parallel()
	url := seedTyped(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sagas", "show", "order", "nope"}, "list them with idem sagas ls --store " + url + " --saga-type order"},
		{[]string{"timers", "cancel", "order", "nope", "deadline"}, "list them with idem timers ls --store " + url + " --saga-type order"},
		{[]string{"schedules", "pause", "nope"}, "list them with idem schedules ls --store " + url},
	} {
		code, _, errOut := run(t, append(tc.args, "--store", url)...)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, err %q; want 1 and %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
}

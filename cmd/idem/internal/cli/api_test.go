package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
)

// apiStore is a store an engine runs on with its own queue, as idem serve
// runs on one.
type apiStore interface {
	store.Store
	transport.Transport
	store.Scheduler
	store.ReplicaRegistry
	Close() error
}

// apiRig is a running engine with the order saga, a schedule, and its
// admin API behind a token; storeArgs name its store to the commands
// that read the store directly.
type apiRig struct {
	e         *idem.Engine
	st        apiStore
	url       string
	storeArgs []string
}

const (
	rigToken  = "s3cret-admin-token-for-cli"
	rigTickID = "tick-order"
)

func startAPIRig(t *testing.T, st apiStore, storeArgs ...string) *apiRig {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := idem.NewEngine(st, st, &idem.Config{Logger: logger, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, TimerInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(orders.OrderMachine()); err != nil {
		t.Fatal(err)
	}
	if err := e.Every("cli-hourly", time.Hour, orders.OrderPlaced{OrderID: rigTickID, Items: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(e, st, &admin.Config{Token: rigToken, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Stop(ctx); err != nil {
			t.Errorf("stop engine: %v", err)
		}
		_ = st.Close()
	})
	return &apiRig{e: e, st: st, url: srv.URL, storeArgs: storeArgs}
}

// state is the order saga key's state, "" while it does not exist.
func (r *apiRig) state(t *testing.T, key string) string {
	t.Helper()
	ctx := context.Background()
	uow, err := r.st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	res, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{{SagaType: "order", Key: key}}})
	if err != nil {
		t.Fatal(err)
	}
	if in := res.Instances[store.Key{SagaType: "order", Key: key}]; in != nil {
		return in.State
	}
	return ""
}

// waitState waits for the order saga key to be in state.
func (r *apiRig) waitState(t *testing.T, key, state string) {
	t.Helper()
	enginetest.Eventually(t, func() string {
		if got := r.state(t, key); got != state {
			return "order " + key + " is in state " + got + ", not " + state
		}
		return ""
	})
}

// The commands that need the running engine go through its admin API, on
// SQLite and on PostgreSQL. Not parallel: they read IDEM_ADMIN_TOKEN and
// IDEM_API_URL from the environment.
func TestAPICommands(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "idem.db")
		st, err := sqlitestore.Open(context.Background(), path, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAPICommands(t, startAPIRig(t, st, "--store", "sqlite://"+path))
	})
	t.Run("postgres", func(t *testing.T) {
		b := setupPG(t)
		st, err := pgstore.Open(context.Background(), b.url, &pgstore.Config{Schema: b.schema, Migrate: true})
		if err != nil {
			t.Fatal(err)
		}
		checkAPICommands(t, startAPIRig(t, st, "--store", b.url, "--schema", b.schema))
	})
}

func checkAPICommands(t *testing.T, r *apiRig) {
	t.Setenv(envAdminToken, rigToken)
	t.Setenv(envAPIURL, "")
	checkSend(t, r)
	checkFire(t, r)
	checkAPIRefusals(t, r)
	checkReplicas(t, r)
	checkRetries(t, r)
}

// An event sent with idem sagas send is applied: the saga's state changes,
// under the message ID printed, and the journal names the command line.
func checkSend(t *testing.T, r *apiRig) {
	const key = "a/b c-Müller" // a slash, a space, a non-ASCII letter
	code, out, errOut := run(t, "sagas", "send", "order", key, "--api", r.url, "--event", "orders.OrderPlaced", "--body", `{"OrderID":"a/b c-Müller","Items":2}`)
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "as message ") {
		t.Errorf("sagas send printed %q; want the message ID", out)
	}
	r.waitState(t, key, "AwaitingPayment")

	body := filepath.Join(t.TempDir(), "pay.json")
	if err := os.WriteFile(body, []byte(`{"OrderID":"a/b c-Müller","Amount":2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envAPIURL, r.url) // the address from the environment this time
	code, out, errOut = run(t, "sagas", "send", "order", key, "--event", "orders.PaymentReceived", "--body-file", body, "--id", "pay-ab")
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "as message pay-ab") {
		t.Errorf("sagas send --id pay-ab printed %q; want the message ID pay-ab", out)
	}
	r.waitState(t, key, "Shipped")
	// A key of dots alone is a key, not a path step.
	code, out, errOut = run(t, "sagas", "send", "order", "..", "--event", "orders.OrderPlaced", "--body", `{"OrderID":"..","Items":1}`)
	wantExit(t, code, out, errOut, 0)
	r.waitState(t, "..", "AwaitingPayment")
	journal, err := r.st.Journal(context.Background(), store.Key{SagaType: "order", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if last := journal[len(journal)-1]; !strings.HasPrefix(last.Actor, "api: cli") {
		t.Errorf("the payment's journal entry names %q; want the command line (api: cli…)", last.Actor)
	}
	// The API's own refusal reaches the user, with exit 2.
	code, _, errOut = run(t, "sagas", "send", "order", "o-9", "--event", "billing.InvoiceSent", "--body", `{}`)
	if code != 2 || !strings.Contains(errOut, "400") || !strings.Contains(errOut, "takes no message of type") {
		t.Errorf("send of a type the saga does not take: exit %d, stderr %q; want 2 and the API's message", code, errOut)
	}
	for _, bad := range [][2]string{{"order", "a\x00b"}, {"order", "\xff"}, {"", "o-1"}} {
		if code, _, errOut := run(t, "sagas", "send", bad[0], bad[1], "--event", "orders.OrderPlaced", "--body", `{}`); code != 2 || strings.Contains(errOut, "\x00") {
			t.Errorf("send to %q/%q: exit %d, stderr %q; want 2, the bad byte quoted", bad[0], bad[1], code, errOut)
		}
	}
	if code, _, errOut := run(t, "sagas", "send", "order", "o-9", "--event", "orders.OrderPlaced", "--body", `{"OrderID":`); code != 2 || !strings.Contains(errOut, "not JSON") {
		t.Errorf("send of a body that is not JSON: exit %d, stderr %q; want 2", code, errOut)
	}
}

// idem schedules fire fires the tick named once; a second fire of the same
// tick is refused with the API's message and exit 2.
func checkFire(t *testing.T, r *apiRig) {
	ctx := context.Background()
	s, err := r.st.GetSchedule(ctx, "cli-hourly")
	if err != nil {
		t.Fatal(err)
	}
	tick := s.NextDue.UTC().Format(time.RFC3339Nano)
	code, out, errOut := run(t, "schedules", "fire", "cli-hourly", "--tick", tick, "--api", r.url)
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "fired tick "+tick) || !strings.Contains(out, idem.TickID("cli-hourly", s.NextDue)) {
		t.Errorf("schedules fire printed %q; want the tick %s and its message ID", out, tick)
	}
	after, err := r.st.GetSchedule(ctx, "cli-hourly")
	if err != nil {
		t.Fatal(err)
	}
	if !after.LastTick.Equal(s.NextDue) || !after.NextDue.Equal(s.NextDue.Add(time.Hour)) {
		t.Errorf("after fire: last tick %s, next due %s; want %s and an hour later", after.LastTick, after.NextDue, s.NextDue)
	}
	r.waitState(t, rigTickID, "AwaitingPayment") // the tick's message was handled
	code, out, errOut = run(t, "schedules", "fire", "cli-hourly", "--tick", tick, "--api", r.url)
	if code != 2 || !strings.Contains(errOut, "409") || !strings.Contains(errOut, "fired that tick meanwhile") {
		t.Errorf("second fire of tick %s: exit %d, stdout %q, stderr %q; want 2 and the API's 409 message", tick, code, out, errOut)
	}
	if again, err := r.st.GetSchedule(ctx, "cli-hourly"); err != nil || !again.NextDue.Equal(after.NextDue) {
		t.Errorf("after the refused fire: next due %v (%v); want still %s", again, err, after.NextDue)
	}
	if code, _, errOut := run(t, "schedules", "fire", "cli-hourly", "--api", r.url); code != 2 || !strings.Contains(errOut, "--tick is required") {
		t.Errorf("fire without --tick: exit %d, stderr %q; want 2 saying --tick is required", code, errOut)
	}
}

// A wrong token is refused with exit 2 and the API's message, and no token
// is ever printed; without an address the error names the flag and the
// variable; an API that cannot be reached is exit 1.
func checkAPIRefusals(t *testing.T, r *apiRig) {
	const wrong = "wrong-token-do-not-print"
	t.Setenv(envAdminToken, wrong)
	code, out, errOut := run(t, "sagas", "send", "order", "o-1", "--api", r.url, "--event", "orders.OrderPlaced", "--body", `{"OrderID":"o-1","Items":1}`)
	if code != 2 || !strings.Contains(errOut, "401") || !strings.Contains(errOut, "missing or wrong admin token") {
		t.Errorf("wrong token: exit %d, stderr %q; want 2 and the API's message", code, errOut)
	}
	for _, tok := range []string{wrong, rigToken} {
		if strings.Contains(out+errOut, tok) {
			t.Errorf("a token is printed: stdout %q, stderr %q", out, errOut)
		}
	}
	if r.state(t, "o-1") != "" {
		t.Error("the send with a wrong token created order o-1")
	}
	t.Setenv(envAdminToken, rigToken)
	t.Setenv(envAPIURL, "")
	code, _, errOut = run(t, "schedules", "fire", "cli-hourly", "--tick", "2030-01-01T00:00:00Z")
	if code != 2 || !strings.Contains(errOut, "--api") || !strings.Contains(errOut, envAPIURL) {
		t.Errorf("no --api and no %s: exit %d, stderr %q; want 2 naming both", envAPIURL, code, errOut)
	}
	closed := httptest.NewServer(nil)
	closed.Close()
	if code, _, errOut := run(t, "schedules", "fire", "cli-hourly", "--tick", "2030-01-01T00:00:00Z", "--api", closed.URL); code != 1 || strings.Contains(errOut, rigToken) {
		t.Errorf("an API that cannot be reached: exit %d, stderr %q; want 1, no token", code, errOut)
	}
	// A send that found no server was not sent, and says so.
	if code, _, errOut := run(t, "sagas", "send", "order", "o-1", "--api", closed.URL, "--event", "orders.OrderPlaced", "--body", `{"OrderID":"o-1","Items":1}`); code != 1 || !strings.Contains(errOut, "not sent") {
		t.Errorf("a send to a closed port: exit %d, stderr %q; want 1 and not sent", code, errOut)
	}
	// A send whose answer is lost names the ID to send it again under.
	stop := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the request arrived; its answer never leaves
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer hung.Close()
	defer close(stop) // before Close, which waits for the handler
	if code, _, errOut := run(t, "sagas", "send", "order", "o-1", "--api", hung.URL, "--timeout", "200ms", "--event", "orders.OrderPlaced", "--body", `{"OrderID":"o-1","Items":1}`); code != 1 || !regexp.MustCompile(`may have been sent: send again with --id [0-9a-f]{32}`).MatchString(errOut) {
		t.Errorf("a send whose answer is lost: exit %d, stderr %q; want 1 and the ID to send again with", code, errOut)
	}
	if code, _, errOut := run(t, "schedules", "fire", "cli-hourly", "--tick", "2030-01-01T00:00:00Z", "--api", "http://user:pw@127.0.0.1:1"); code != 2 || strings.Contains(errOut, "pw") {
		t.Errorf("an --api with credentials: exit %d, stderr %q; want 2, the password not printed", code, errOut)
	}
}

// idem replicas ls shows the running engine alive and a replica whose
// heartbeat stopped before the engine started replaced, as the console
// judges them; hostile strings are quoted.
func checkReplicas(t *testing.T, r *apiRig) {
	// Less than an hour old: the engine prunes a record it replaced an
	// hour after its last beat.
	old := time.Now().Add(-30 * time.Minute).UTC().Truncate(time.Microsecond)
	if err := r.st.Heartbeat(context.Background(), &store.Replica{ID: "dead-replica", Host: "<script>x</script>\x1b[31m", Version: "v0",
		StartedAt: old, BeatAt: old, Interval: time.Second}); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, func() string {
		_, out, _ := run(t, append([]string{"replicas", "ls"}, r.storeArgs...)...)
		if !strings.Contains(out, r.e.ReplicaID()) {
			return "replicas ls does not list the engine yet:\n" + out
		}
		return ""
	})
	code, out, errOut := run(t, append([]string{"replicas", "ls"}, r.storeArgs...)...)
	wantExit(t, code, out, errOut, 0)
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, r.e.ReplicaID()) && !strings.Contains(line, " alive "):
			t.Errorf("the running engine's row is not alive: %q", line)
		case strings.HasPrefix(line, "dead-replica") && !strings.Contains(line, " replaced "):
			t.Errorf("the replica beating no more since before the engine started is not replaced: %q", line)
		}
	}
	if strings.Contains(out, "\x1b") || !strings.Contains(errOut, "1 alive, 0 stopped, 0 gone, 1 replaced") {
		t.Errorf("replicas ls: stdout %q, stderr %q; want the escape quoted and the counts", out, errOut)
	}
	code, out, errOut = run(t, append([]string{"replicas", "ls", "--json"}, r.storeArgs...)...)
	wantExit(t, code, out, errOut, 0)
	var list admin.ReplicaList
	if err := json.Unmarshal([]byte(out), &list); err != nil || list.Counts != (admin.ReplicaCounts{Alive: 1, Replaced: 1}) || len(list.Replicas) != 2 {
		t.Errorf("replicas ls --json: %+v (%v); want one alive and one replaced", list, err)
	}
}

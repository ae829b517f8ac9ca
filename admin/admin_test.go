package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/store/sqlitestore"
)

type bundle struct {
	e   *idem.Engine
	st  consoleStore
	obs *admin.Observer
	srv *httptest.Server
}

// setup runs an engine with the orders saga on a fresh store that is also
// the queue (SQLite, or what IDEM_CONSOLE_STORE names), and serves it with cfg.
func setup(t *testing.T, cfg *admin.Config) *bundle {
	t.Helper()
	return setupWith(t, cfg, 0)
}

// setupWith is setup with the engine's Config.MaxKeyLen (0: the default),
// and extra machines registered beside the order saga.
func setupWith(t *testing.T, cfg *admin.Config, maxKeyLen int, extra ...idem.Machine) *bundle {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := openConsoleStore(t, logger)
	obs := admin.NewObserver()
	e, err := idem.NewEngine(st, st, &idem.Config{Logger: logger, Observe: obs.Observe, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, TimerInterval: 50 * time.Millisecond,
		MaxKeyLen: maxKeyLen})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(orders.OrderMachine()); err != nil {
		t.Fatal(err)
	}
	for _, m := range extra {
		if err := e.Register(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var c admin.Config
	if cfg != nil {
		c = *cfg
	}
	c.Observer, c.Logger = obs, logger
	h, err := admin.New(e, st, &c)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Stop(sctx); err != nil {
			t.Errorf("stop engine: %v", err)
		}
		st.Close()
	})
	return &bundle{e: e, st: st, obs: obs, srv: srv}
}

// do sends a request and returns the status and body.
func (b *bundle) do(t *testing.T, method, path, body string, header ...string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.srv.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(out)
}

// getJSON requires 200 and decodes the answer into v.
func (b *bundle) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	code, body := b.do(t, http.MethodGet, path, "")
	if code != http.StatusOK {
		t.Fatalf("GET %s: status %d, body %s; want 200", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: decode %s: %v", path, body, err)
	}
}

// eventually polls cond until it holds or 10s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAdminEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	if code, body := b.do(t, "GET", "/healthz", ""); code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("healthz: %d %s", code, body)
	}
	if code, body := b.do(t, "GET", "/readyz", ""); code != 200 {
		t.Fatalf("readyz: %d %s; want 200", code, body)
	}

	// A message and its duplicate: both accepted, applied once.
	placed := `{"id": "m-1", "type": "orders.OrderPlaced", "body": {"OrderID": "o-1", "Items": 3}}`
	for i := range 2 {
		code, body := b.do(t, "POST", "/api/messages", placed)
		if code != http.StatusAccepted {
			t.Fatalf("submit #%d: status %d, body %s; want 202", i+1, code, body)
		}
		var acc admin.Accepted
		if err := json.Unmarshal([]byte(body), &acc); err != nil || acc.ID != "m-1" || acc.Saga != "order" || acc.Key != "o-1" {
			t.Fatalf("submit #%d: got %s (%v), want id m-1 for saga order/o-1", i+1, body, err)
		}
	}
	// A second order, to page through.
	if code, body := b.do(t, "POST", "/api/messages", `{"id": "m-2", "type": "orders.OrderPlaced", "body": {"OrderID": "o-2", "Items": 1}}`); code != 202 {
		t.Fatalf("submit m-2: %d %s", code, body)
	}
	eventually(t, "the duplicate to be skipped and both orders applied", func() bool {
		s := b.e.Stats()
		return s.Duplicates >= 1 && s.Applied >= 2
	})

	var list admin.SagaList
	b.getJSON(t, "/api/sagas?type=order&state=AwaitingPayment", &list)
	if len(list.Sagas) != 2 || list.Sagas[0].Key != "o-1" || list.Sagas[0].State != "AwaitingPayment" || list.Sagas[0].Status != "active" {
		t.Fatalf("list sagas: got %+v, want o-1 and o-2 in AwaitingPayment", list)
	}
	var data orders.Order
	if err := json.Unmarshal(list.Sagas[0].Data, &data); err != nil || data.Items != 3 {
		t.Fatalf("saga data %s: got %+v (%v), want Items 3", list.Sagas[0].Data, data, err)
	}
	var page admin.SagaList
	b.getJSON(t, "/api/sagas?limit=1", &page)
	if len(page.Sagas) != 1 || page.Next == "" {
		t.Fatalf("first page: got %+v, want one saga and a cursor", page)
	}
	b.getJSON(t, "/api/sagas?limit=1&after="+url.QueryEscape(page.Next), &page)
	if len(page.Sagas) != 1 || page.Sagas[0].Key != "o-2" {
		t.Fatalf("second page: got %+v, want o-2", page)
	}
	b.getJSON(t, "/api/sagas?type=order&state=Shipped", &list)
	if len(list.Sagas) != 0 {
		t.Fatalf("shipped sagas: got %+v, want none", list.Sagas)
	}

	var one admin.Saga
	b.getJSON(t, "/api/sagas/order/o-1", &one)
	if one.Saga.Key != "o-1" || len(one.Journal) != 1 || one.Journal[0].MessageID != "m-1" || one.Journal[0].ToState != "AwaitingPayment" {
		t.Fatalf("saga o-1: got %+v, want one journal entry for m-1 (the duplicate applied once)", one)
	}
	if code, body := b.do(t, "GET", "/api/sagas/order/nope", ""); code != 404 || !strings.Contains(body, "GET /api/sagas?type=order") {
		t.Fatalf("missing saga: %d %s; want 404 with a hint", code, body)
	}

	// Malformed requests are refused with a reason; nothing is stored.
	for _, tc := range []struct{ name, body, want string }{
		{"not JSON", `{"id": "x",`, "not a valid message"},
		{"no id", `{"type": "orders.OrderPlaced", "body": {}}`, "no id"},
		{"no type", `{"id": "x", "body": {}}`, "no type"},
		{"no body", `{"id": "x", "type": "orders.OrderPlaced"}`, "no body"},
		{"unknown field", `{"id": "x", "type": "t", "body": {}, "bdy": 1}`, "unknown field"},
		{"two values", `{"id": "x", "type": "t", "body": {}} {}`, "more than one"},
		{"body that does not fit", `{"id": "x", "type": "orders.OrderPlaced", "body": {"OrderID": 5}}`, "does not fit"},
		{"empty key", `{"id": "x", "type": "orders.OrderPlaced", "body": {"OrderID": " "}}`, "not valid"},
	} {
		code, body := b.do(t, "POST", "/api/messages", tc.body)
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s: status %d, body %s; want 400 with an error containing %q", tc.name, code, body, tc.want)
		}
	}

	// An unknown type is accepted and dead-lettered with a reason.
	if code, body := b.do(t, "POST", "/api/messages", `{"id": "u-1", "type": "nobody.Consumes", "body": {"x": 1}}`); code != 202 {
		t.Fatalf("submit unknown type: %d %s; want 202", code, body)
	}
	var dls admin.DeadLetterList
	eventually(t, "the unknown type to be dead-lettered", func() bool {
		b.getJSON(t, "/api/dead-letters", &dls)
		return len(dls.DeadLetters) == 1
	})
	if d := dls.DeadLetters[0]; d.ID != "u-1" || d.Reason != idem.ReasonUnknownType || d.Envelope.BodyEncoding != "json" || string(d.Envelope.Body) != `{"x":1}` {
		t.Fatalf("dead letter: got %+v, want u-1 with reason unknown_type and its JSON body", d)
	}
	var dl admin.DeadLetter
	b.getJSON(t, "/api/dead-letters/u-1", &dl)
	if dl.ID != "u-1" || !strings.Contains(dl.Error, "nobody.Consumes") {
		t.Fatalf("dead letter u-1: got %+v", dl)
	}
	if code, body := b.do(t, "GET", "/api/dead-letters/none", ""); code != 404 {
		t.Fatalf("missing dead letter: %d %s; want 404", code, body)
	}

	// Replay: it is published again and, still unknown, dead-lettered again.
	dead := b.e.Stats().DeadLettered
	if code, body := b.do(t, "POST", "/api/dead-letters/u-1/replay", ""); code != 202 {
		t.Fatalf("replay: %d %s; want 202", code, body)
	}
	eventually(t, "the replayed message to be dead-lettered again", func() bool {
		if b.e.Stats().DeadLettered <= dead {
			return false
		}
		code, _ := b.do(t, "GET", "/api/dead-letters/u-1", "")
		return code == 200
	})
	if code, body := b.do(t, "POST", "/api/dead-letters/none/replay", ""); code != 404 {
		t.Fatalf("replay missing: %d %s; want 404", code, body)
	}
	if code, body := b.do(t, "DELETE", "/api/dead-letters/u-1", ""); code != 200 {
		t.Fatalf("delete: %d %s; want 200", code, body)
	}
	if code, _ := b.do(t, "GET", "/api/dead-letters/u-1", ""); code != 404 {
		t.Fatalf("after delete: %d; want 404", code)
	}
	if code, _ := b.do(t, "DELETE", "/api/dead-letters/u-1", ""); code != 404 {
		t.Fatalf("delete again: %d; want 404", code)
	}

	code, metrics := b.do(t, "GET", "/metrics", "")
	for _, want := range []string{
		`idem_messages_total{result="applied"} 2`, `idem_messages_total{result="duplicate"} 1`,
		"idem_unit_of_work_seconds_bucket", "idem_unit_of_work_seconds_count", "idem_outbox_backlog 0",
		"idem_timer_lag_seconds", "idem_store_up 1", "go_goroutines",
	} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Errorf("metrics: status %d, want a line with %q in:\n%s", code, want, metrics)
		}
	}
	if code, body := b.do(t, "GET", "/api/nothing", ""); code != 404 || !strings.Contains(body, `"error"`) {
		t.Errorf("unknown route: %d %s; want a JSON 404", code, body)
	}
	if code, body := b.do(t, "GET", "/api/sagas?limit=0", ""); code != 400 || !strings.Contains(body, "limit") {
		t.Errorf("bad limit: %d %s; want 400", code, body)
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	b := setup(t, &admin.Config{Token: "s3cret-token-0123456789"})
	for _, tc := range []struct {
		name, path string
		header     []string
		want       int
	}{
		{"no token", "/api/sagas", nil, 401},
		{"wrong token", "/api/sagas", []string{"Authorization", "Bearer s3cret-token-012345678X"}, 401},
		{"prefix of the token", "/api/sagas", []string{"Authorization", "Bearer s3cret"}, 401},
		{"not bearer", "/api/sagas", []string{"Authorization", "s3cret-token-0123456789"}, 401},
		{"right token", "/api/sagas", []string{"Authorization", "Bearer s3cret-token-0123456789"}, 200},
		{"metrics without token", "/metrics", nil, 401},
		{"metrics with token", "/metrics", []string{"Authorization", "Bearer s3cret-token-0123456789"}, 200},
		{"healthz is open", "/healthz", nil, 200},
		{"readyz is open", "/readyz", nil, 200},
	} {
		code, body := b.do(t, "GET", tc.path, "", tc.header...)
		if code != tc.want {
			t.Errorf("%s: GET %s: status %d, body %s; want %d", tc.name, tc.path, code, body, tc.want)
		}
		if strings.Contains(body, "s3cret") {
			t.Errorf("%s: the answer %s shows the token", tc.name, body)
		}
	}
	code, body := b.do(t, "POST", "/api/messages", `{"id": "m", "type": "orders.OrderPlaced", "body": {"OrderID": "o"}}`)
	if code != 401 || !strings.Contains(body, "IDEM_ADMIN_TOKEN") {
		t.Errorf("submit without token: %d %s; want 401 naming IDEM_ADMIN_TOKEN", code, body)
	}
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, &admin.Config{MaxBodyBytes: 128})
	big := `{"id": "m", "type": "orders.OrderPlaced", "body": {"OrderID": "` + strings.Repeat("x", 200) + `"}}`
	if code, body := b.do(t, "POST", "/api/messages", big); code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "128 bytes") {
		t.Fatalf("big body: %d %s; want 413 naming the limit", code, body)
	}
	if code, body := b.do(t, "POST", "/api/messages", `{"id": "m", "type": "orders.OrderPlaced", "body": {"OrderID": "o"}}`); code != 202 {
		t.Fatalf("small body: %d %s; want 202", code, body)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if _, err := admin.New(b.e, b.st, &admin.Config{MaxBodyBytes: -1}); err == nil {
		t.Error("New with a negative MaxBodyBytes: got no error")
	}
	if _, err := admin.New(nil, nil, nil); err == nil {
		t.Error("New without an engine: got no error")
	}
}

func TestReadyzWhenTheStoreIsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e, err := idem.NewEngine(st, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(e, st, &admin.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	for _, path := range []string{"/readyz", "/metrics"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, "GET", "http://127.0.0.1"+path, nil))
		body := rec.Body.String()
		switch path {
		case "/readyz":
			if rec.Code != http.StatusServiceUnavailable || !strings.Contains(body, "store does not answer") || strings.Contains(body, "idem.db") {
				t.Errorf("readyz on a closed store: %d %s; want 503 with a reason and no path", rec.Code, body)
			}
		case "/metrics":
			if rec.Code != 200 || !strings.Contains(body, "idem_store_up 0") {
				t.Errorf("metrics on a closed store: %d; want 200 with idem_store_up 0 in:\n%s", rec.Code, body)
			}
		}
	}
}

func TestBrowserAttacksAreRefused(t *testing.T) {
	b := setup(t, nil)
	// DNS rebinding: a page on evil.example resolving to 127.0.0.1.
	if code, body := b.do(t, "GET", "/api/sagas", "", "Host", "evil.example"); code != http.StatusForbidden || !strings.Contains(body, "IDEM_ADMIN_TOKEN") {
		t.Errorf("rebinding Host: %d %s; want 403 naming IDEM_ADMIN_TOKEN", code, body)
	}
	// CSRF: a cross-site form post, and a text/plain fetch.
	msg := `{"id": "x-1", "type": "orders.OrderPlaced", "body": {"OrderID": "o-9", "Items": 1}}`
	if code, body := b.do(t, "POST", "/api/messages", msg, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Errorf("cross-site POST: %d %s; want 403", code, body)
	}
	if code, body := b.do(t, "POST", "/api/messages", msg, "Content-Type", "text/plain"); code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain POST: %d %s; want 415", code, body)
	}
}

// Saga keys are checked against the engine's MaxKeyLen, not a fixed limit:
// an engine configured for long keys is reachable through the API with
// them, and a key over its limit is refused on the way in and out.
func TestKeysUpToTheEnginesMaxKeyLen(t *testing.T) {
	t.Parallel()
	b := setupWith(t, nil, 2048)
	submit := func(id, key string) (int, string) {
		t.Helper()
		return b.do(t, "POST", "/api/messages", fmt.Sprintf(`{"id": %q, "type": "orders.OrderPlaced", "body": {"OrderID": %q, "Items": 1}}`, id, key))
	}
	long := strings.Repeat("k", 1500) // over the default 256 and over the 1024 of other fields
	code, body := submit("m-long", long)
	if code != http.StatusAccepted {
		t.Fatalf("submit a key of %d bytes under MaxKeyLen 2048: status %d, body %.200s; want 202", len(long), code, body)
	}
	var acc admin.Accepted
	if err := json.Unmarshal([]byte(body), &acc); err != nil || acc.Key != long {
		t.Fatalf("submit: got %.200s (%v), want the long key", body, err)
	}
	eventually(t, "the long-keyed order to be applied", func() bool { return b.e.Stats().Applied >= 1 })
	var one admin.Saga
	b.getJSON(t, "/api/sagas/order/"+url.PathEscape(long), &one)
	if one.Saga.Key != long || len(one.Journal) != 1 {
		t.Fatalf("saga with the long key: got key of %d bytes and %d journal entries, want %d and 1", len(one.Saga.Key), len(one.Journal), len(long))
	}

	tooLong := strings.Repeat("k", 2049)
	if code, body := submit("m-too-long", tooLong); code != http.StatusBadRequest || !strings.Contains(body, "not valid") {
		t.Errorf("submit a key of %d bytes under MaxKeyLen 2048: status %d, body %.200s; want 400 naming the key invalid", len(tooLong), code, body)
	}
	if code, body := b.do(t, "GET", "/api/sagas/order/"+url.PathEscape(tooLong), ""); code != http.StatusBadRequest {
		t.Errorf("get a key of %d bytes under MaxKeyLen 2048: status %d, body %.200s; want 400", len(tooLong), code, body)
	}
	// An explicit correlation ID as long as the limit is accepted too.
	code, body = b.do(t, "POST", "/api/messages", fmt.Sprintf(`{"id": "m-corr", "type": "orders.OrderPlaced", "correlation_id": %q, "body": {"OrderID": %q, "Items": 1}}`, long+"x", long+"x"))
	if code != http.StatusAccepted {
		t.Errorf("submit with a correlation_id of %d bytes: status %d, body %.200s; want 202", len(long)+1, code, body)
	}
}

// /readyz answers 503 for an engine that has not started, 200 while it
// runs, and 503 again once it has stopped.
func TestReadyzFollowsTheEngine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e, err := idem.NewEngine(st, st, &idem.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(orders.OrderMachine()); err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(e, st, &admin.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	code := func() int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/readyz", nil))
		return rec.Code
	}
	if c := code(); c != http.StatusServiceUnavailable {
		t.Errorf("readyz before Start: %d, want 503", c)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if c := code(); c != http.StatusOK {
		t.Errorf("readyz while running: %d, want 200", c)
	}
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if c := code(); c != http.StatusServiceUnavailable {
		t.Errorf("readyz after Stop: %d, want 503", c)
	}
}

package admin_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/store"
)

const hostileKey = `<script>alert(1)</script>`

// seed places orders (one with a hostile key), waits until the engine
// applied them, and records a dead letter holding a valid OrderPlaced for
// order o-dead, which a replay applies.
func seed(t *testing.T, b *bundle) {
	t.Helper()
	ctx := context.Background()
	keys := []string{"o-1", "o-2", "o-3", "x-9", hostileKey}
	for _, k := range keys {
		env, err := b.e.NewEnvelope("placed-"+k, orders.OrderPlaced{OrderID: k, Items: 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.e.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the orders to be applied", func() bool { return b.e.Stats().Applied >= int64(len(keys)) })
	env, err := b.e.NewEnvelope("placed-o-dead", orders.OrderPlaced{OrderID: "o-dead", Items: 1})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	uow, err := b.st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	dls := []store.DeadLetter{{
		ID: env.ID, Envelope: env, Reason: "store_unavailable", Error: "apply: store: connection refused",
		SagaType: "order", Key: "o-dead", Attempts: 5, FirstFailedAt: now.Add(-time.Minute), LastFailedAt: now,
	}}
	for _, id := range []string{"inv-1", "inv-2"} {
		e := idem.Envelope{ID: id, Type: "billing.InvoiceSent", Body: []byte(`{"invoice":"` + id + `"}`)}
		dls = append(dls, store.DeadLetter{ID: id, Envelope: e, Reason: "unknown_type", Error: "no saga or handler consumes billing.InvoiceSent",
			Attempts: 1, FirstFailedAt: now.Add(-time.Hour), LastFailedAt: now.Add(-time.Hour)})
	}
	if err := uow.Commit(ctx, &store.Changes{DeadLetters: dls}); err != nil {
		t.Fatal(err)
	}
}

// browser is an HTTP client with a cookie jar.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newBrowser(t *testing.T, b *bundle) *browser {
	jar, _ := cookiejar.New(nil)
	c := *b.srv.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &browser{t: t, base: b.srv.URL, c: &c}
}

func (br *browser) get(path string) (int, string) {
	br.t.Helper()
	resp, err := br.c.Get(br.base + path)
	if err != nil {
		br.t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb bytes.Buffer
	if _, err := sb.ReadFrom(resp.Body); err != nil {
		br.t.Fatal(err)
	}
	return resp.StatusCode, sb.String()
}

// post sends a same-origin form POST, as a browser would.
func (br *browser) post(path string, form url.Values, header ...string) (*http.Response, string) {
	br.t.Helper()
	req, err := http.NewRequest(http.MethodPost, br.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		br.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", br.base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := br.c.Do(req)
	if err != nil {
		br.t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb bytes.Buffer
	_, _ = sb.ReadFrom(resp.Body)
	return resp, sb.String()
}

func TestConsolePagesRender(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	br := newBrowser(t, b)
	for path, want := range map[string]string{
		"/":                           "Outbox backlog",
		"/sagas":                      "AwaitingPayment",
		"/instances":                  "o-2",
		"/instances/order/o-1":        "OrderPlaced",
		"/dead-letters":               "store_unavailable",
		"/dead-letters/placed-o-dead": "connection refused",
		"/timers":                     "overdue",
	} {
		code, body := br.get(path)
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: status %d, want 200 and a page containing %q", path, code, want)
		}
	}
	if code, _ := br.get("/nope"); code != http.StatusNotFound {
		t.Errorf("GET /nope: status %d, want 404", code)
	}
}

func TestConsoleEscapesHostileKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	br := newBrowser(t, b)
	for _, path := range []string{"/instances", "/instances/order/" + url.PathEscape(hostileKey), "/timers"} {
		code, body := br.get(path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: status %d, want 200", path, code)
		}
		if strings.Contains(body, hostileKey) {
			t.Errorf("GET %s: the key appears unescaped in the HTML", path)
		}
		if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("GET %s: the escaped key is missing", path)
		}
	}
}

// The console's CSRF defence is http.CrossOriginProtection: a POST from
// another origin is refused, whether the browser says so with
// Sec-Fetch-Site or only with Origin (no Sec-Fetch-Site over plain HTTP to
// a non-loopback host), with or without a signed-in session; a same-origin
// POST needs no token, so a form loaded before a restart still works.
func TestConsoleRefusesCrossOriginPost(t *testing.T) {
	t.Parallel()
	for _, token := range []string{"", "s3cret-token-0123456789"} {
		b := setup(t, &admin.Config{Token: token})
		seed(t, b)
		br := newBrowser(t, b)
		if token != "" {
			if resp, _ := br.post("/login", url.Values{"token": {token}, "next": {"/timers"}}); resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("login: status %d, want 303", resp.StatusCode)
			}
		}
		form := url.Values{"type": {"order"}, "key": {"o-1"}, "name": {"overdue"}, "back": {"/timers"}, "confirm": {"yes"}}
		for _, h := range [][]string{
			{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"},
			{"Origin", "https://evil.127.0.0.1.nip.io", "Sec-Fetch-Site", "same-site"},
			{"Origin", "http://evil.example", "Sec-Fetch-Site", ""},
			{"Origin", "null", "Sec-Fetch-Site", ""},
		} {
			if resp, _ := br.post("/timers/cancel", form, h...); resp.StatusCode != http.StatusForbidden {
				t.Errorf("token %q, cancel with %q: status %d, want 403", token, h, resp.StatusCode)
			}
		}
		if n := timerCount(t, b, "o-1"); n != 1 {
			t.Fatalf("token %q, after refused requests: %d timers of o-1, want 1", token, n)
		}
		if resp, _ := br.post("/timers/cancel", form); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("token %q, same-origin cancel: status %d, want 303", token, resp.StatusCode)
		}
		if n := timerCount(t, b, "o-1"); n != 0 {
			t.Errorf("token %q, after cancel: %d timers of o-1, want 0", token, n)
		}
	}
}

func timerCount(t *testing.T, b *bundle, key string) int {
	t.Helper()
	ts, err := b.st.ListTimers(context.Background(), &store.ListParams{SagaType: "order", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tm := range ts {
		if tm.Key == key {
			n++
		}
	}
	return n
}

func TestConsoleReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, &admin.Config{ReadOnly: true})
	seed(t, b)
	br := newBrowser(t, b)
	for _, path := range []string{"/dead-letters", "/timers", "/instances/order/o-1"} {
		code, body := br.get(path)
		if code != http.StatusOK || !strings.Contains(body, "read-only") {
			t.Errorf("GET %s in read-only mode: status %d, want 200 and the read-only badge", path, code)
		}
		if strings.Contains(body, `method="post"`) {
			t.Errorf("GET %s in read-only mode shows a mutating form", path)
		}
	}
	form := url.Values{"type": {"order"}, "key": {"o-1"}, "name": {"overdue"}}
	if resp, _ := br.post("/timers/cancel", form); resp.StatusCode != http.StatusForbidden {
		t.Errorf("console cancel in read-only mode: status %d, want 403", resp.StatusCode)
	}
	if code, _ := b.do(t, http.MethodDelete, "/api/timers/order/o-1/overdue", ""); code != http.StatusForbidden {
		t.Errorf("API cancel in read-only mode: status %d, want 403", code)
	}
	if code, _ := b.do(t, http.MethodPost, "/api/dead-letters/replay", ""); code != http.StatusForbidden {
		t.Errorf("API bulk replay in read-only mode: status %d, want 403", code)
	}
	if n := timerCount(t, b, "o-1"); n != 1 {
		t.Errorf("read-only: %d timers of o-1, want 1", n)
	}
}

func TestConsoleLogin(t *testing.T) {
	t.Parallel()
	b := setup(t, &admin.Config{Token: "s3cret-token-0123456789"})
	br := newBrowser(t, b)
	resp, err := br.c.Get(br.base + "/instances")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/login") {
		t.Fatalf("GET /instances without a session: %d to %q, want 303 to /login", resp.StatusCode, loc)
	}
	if resp, _ := br.post("/login", url.Values{"token": {"wrong"}, "next": {"/instances"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("login with a wrong token: status %d, want 401", resp.StatusCode)
	}
	resp, _ = br.post("/login", url.Values{"token": {"s3cret-token-0123456789"}, "next": {"//evil.example/"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Errorf("login: %d to %q, want 303 to / (an off-site next is dropped)", resp.StatusCode, resp.Header.Get("Location"))
	}
	cookie := resp.Header.Get("Set-Cookie")
	for _, want := range []string{"idem_session=", "HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(cookie, want) {
			t.Errorf("session cookie %q lacks %s", cookie, want)
		}
	}
	code, body := br.get("/instances")
	if code != http.StatusOK {
		t.Fatalf("GET /instances after login: status %d, want 200", code)
	}
	if strings.Contains(body, "s3cret-token-0123456789") {
		t.Error("a page shows the admin token")
	}
	if code, _ := b.do(t, http.MethodGet, "/api/sagas", ""); code != http.StatusUnauthorized {
		t.Errorf("API without the bearer token: status %d, want 401 (the session cookie is for the console only)", code)
	}
}

func TestConsoleMountedUnderPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	mux := http.NewServeMux()
	mux.Handle("/idem/", http.StripPrefix("/idem", b.srv.Config.Handler))
	b.srv.Config.Handler = mux
	br := newBrowser(t, b)
	code, body := br.get("/idem/sagas")
	if code != http.StatusOK {
		t.Fatalf("GET /idem/sagas: status %d, want 200", code)
	}
	for _, want := range []string{`href="/idem/assets/console.css"`, `href="/idem/instances"`} {
		if !strings.Contains(body, want) {
			t.Errorf("page under /idem lacks %s", want)
		}
	}
	if code, _ := br.get("/idem/assets/htmx.min.js"); code != http.StatusOK {
		t.Errorf("GET /idem/assets/htmx.min.js: status %d, want 200", code)
	}
}

// rowOf returns the table row of the page that links to saga order/key.
func rowOf(t *testing.T, page, key string) string {
	t.Helper()
	for _, row := range strings.Split(page, "<tr") {
		if strings.Contains(row, `/instances/order/`+key+`"`) {
			return row
		}
	}
	t.Fatalf("no row links to order/%s", key)
	return ""
}

// finishedTimer pays order o-3, which finishes it (Shipped), and leaves a
// timer on it, as a machine that does not unschedule its timers would.
func finishedTimer(t *testing.T, b *bundle) {
	t.Helper()
	env, err := b.e.NewEnvelope("paid-o-3", orders.PaymentReceived{OrderID: "o-3", Amount: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.e.PublishAndWait(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	addTimer(t, b, "order", "o-3")
}

// addTimer commits a timer "reminder" due in two hours on saga typ/key.
func addTimer(t *testing.T, b *bundle, typ, key string) {
	t.Helper()
	ctx := context.Background()
	late, err := b.e.NewEnvelope("late-"+key, orders.PaymentOverdue{OrderID: key})
	if err != nil {
		t.Fatal(err)
	}
	uow, err := b.st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &store.Changes{Timers: []store.Timer{{SagaType: typ, Key: key, Name: "reminder", DueAt: time.Now().Add(2 * time.Hour), Envelope: late}}}); err != nil {
		t.Fatal(err)
	}
}

// A timer left on a finished saga is marked so, and offers no action;
// the console refuses to change it.
func TestConsoleTimersOfFinishedSaga(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	finishedTimer(t, b)
	br := newBrowser(t, b)
	for _, path := range []string{"/timers", "/instances/order/o-3"} {
		_, page := br.get(path)
		row := rowOf(t, page, "o-3")
		if !strings.Contains(row, "saga finished") {
			t.Errorf("GET %s: the timer of the finished saga o-3 is not marked finished:\n%s", path, row)
		}
		if strings.Contains(row, "/timers/cancel") || strings.Contains(row, "/timers/reschedule") {
			t.Errorf("GET %s: the timer of the finished saga o-3 offers cancel or reschedule:\n%s", path, row)
		}
	}
	_, page := br.get("/timers")
	if row := rowOf(t, page, "o-1"); !strings.Contains(row, "/timers/cancel") || strings.Contains(row, "saga finished") {
		t.Errorf("the timer of the active saga o-1 lost its actions or is marked finished:\n%s", row)
	}
	form := url.Values{"type": {"order"}, "key": {"o-3"}, "name": {"reminder"}, "in": {"1m"}, "confirm": {"yes"}, "back": {"/timers"}}
	for _, action := range []string{"/timers/reschedule", "/timers/cancel"} {
		if resp, _ := br.post(action, form); resp.StatusCode != http.StatusConflict {
			t.Errorf("POST %s on the timer of a finished saga: status %d, want 409", action, resp.StatusCode)
		}
	}
	if n := timerCount(t, b, "o-3"); n != 1 {
		t.Errorf("after refused actions: %d timers of o-3, want 1", n)
	}
	// Nor is the question asked, for a finished saga or a gone one.
	addTimer(t, b, "order", "o-gone")
	for _, key := range []string{"o-3", "o-gone"} {
		path := "/timers/cancel?type=order&key=" + key + "&name=reminder&back=%2Ftimers"
		if code, page := br.get(path); code != http.StatusConflict || strings.Contains(page, `name="confirm"`) {
			t.Errorf("GET %s: status %d, want 409 and no confirmation form:\n%s", path, code, page)
		}
	}
}

// Cancelling a timer asks first, as purging a dead letter does.
func TestConsoleCancelTimerAsksFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	br := newBrowser(t, b)
	br.get("/timers")
	form := url.Values{"type": {"order"}, "key": {"o-1"}, "name": {"overdue"}, "back": {"/timers"}}
	resp, _ := br.post("/timers/cancel", form)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/timers/cancel?") {
		t.Fatalf("cancel without confirm: %d to %q, want 303 to the confirmation /timers/cancel?…", resp.StatusCode, loc)
	}
	if n := timerCount(t, b, "o-1"); n != 1 {
		t.Fatalf("cancel without confirm: %d timers of o-1, want 1 (nothing cancelled yet)", n)
	}
	code, page := br.get(loc)
	if code != http.StatusOK || !strings.Contains(page, "Cancel this timer?") || !strings.Contains(page, `name="confirm" value="yes"`) {
		t.Fatalf("GET %s: status %d, want 200 and a confirmation form:\n%s", loc, code, page)
	}
	form.Set("confirm", "yes")
	if resp, _ := br.post("/timers/cancel", form); resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "done=cancelled") {
		t.Errorf("confirmed cancel: %d to %q, want 303 with done=cancelled", resp.StatusCode, resp.Header.Get("Location"))
	}
	if n := timerCount(t, b, "o-1"); n != 0 {
		t.Errorf("after the confirmed cancel: %d timers of o-1, want 0", n)
	}
}

// safeLog is a log destination the server's goroutines write and the
// test reads.
type safeLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *safeLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *safeLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Wrong tokens are limited: once the client has used its attempts, its
// wrong tokens are answered 429 with Retry-After until the window ends;
// the right token is still accepted.
func TestConsoleLoginRateLimited(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var logs safeLog
	h, err := admin.New(b.e, b.st, &admin.Config{Token: "s3cret-token-0123456789", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	b.srv.Config.Handler = h
	br := newBrowser(t, b)
	var resp *http.Response
	for i := range 30 {
		if resp, _ = br.post("/login", url.Values{"token": {fmt.Sprintf("guess-%d", i)}}); resp.StatusCode != http.StatusUnauthorized {
			break
		}
	}
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("after up to 30 wrong tokens: status %d, want 429", resp.StatusCode)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("429 with Retry-After %q, want a number of seconds", resp.Header.Get("Retry-After"))
	}
	if code, _ := b.do(t, http.MethodGet, "/api/sagas", "", "Authorization", "Bearer guess-api"); code != http.StatusTooManyRequests {
		t.Errorf("the API with a wrong token from the same client within the window: status %d, want 429", code)
	}
	if code, _ := b.do(t, http.MethodGet, "/api/sagas", "", "Authorization", "Bearer s3cret-token-0123456789"); code != http.StatusTooManyRequests {
		t.Errorf("the API with the right token from the same client within the window: status %d, want 429 (a guesser must not learn which guess was right)", code)
	}
	if !strings.Contains(logs.String(), "login refused") || strings.Contains(logs.String(), "guess-") {
		t.Errorf("log: want a line about the refused logins, without the tokens tried:\n%s", logs.String())
	}
	if resp, _ = br.post("/login", url.Values{"token": {"s3cret-token-0123456789"}}); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the right token within the window: status %d, want 429", resp.StatusCode)
	}
	// A minute later the client may try again: the right token signs in,
	// and a wrong one is 401, not 429.
	admin.SetClock(h, func() time.Time { return time.Now().Add(time.Minute) })
	resp, _ = br.post("/login", url.Values{"token": {"s3cret-token-0123456789"}})
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Set-Cookie"), "idem_session=") {
		t.Errorf("the right token after the window: status %d, want 303 and a session", resp.StatusCode)
	}
	if resp, _ = br.post("/login", url.Values{"token": {"guess-later"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong token after the window: status %d, want 401", resp.StatusCode)
	}
}

// In read-only mode the question is refused as the action is.
func TestConsoleCancelTimerReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, &admin.Config{ReadOnly: true})
	seed(t, b)
	br := newBrowser(t, b)
	br.get("/timers")
	if code, _ := br.get("/timers/cancel?type=order&key=o-1&name=overdue&back=%2Ftimers"); code != http.StatusForbidden {
		t.Errorf("GET the cancel question in read-only mode: status %d, want 403", code)
	}
	form := url.Values{"type": {"order"}, "key": {"o-1"}, "name": {"overdue"}, "confirm": {"yes"}}
	if resp, _ := br.post("/timers/cancel", form); resp.StatusCode != http.StatusForbidden {
		t.Errorf("confirmed cancel in read-only mode: status %d, want 403", resp.StatusCode)
	}
	if n := timerCount(t, b, "o-1"); n != 1 {
		t.Errorf("read-only: %d timers of o-1, want 1", n)
	}
}

package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/store"
)

const (
	nfcKey = "M\u00fcller-1"  // the canonical spelling the engine stores
	nfdKey = "Mu\u0308ller-1" // the same key decomposed
)

// seedMuller places order Müller-1 (it holds a timer) and records a dead
// letter for it.
func seedMuller(t *testing.T, b *bundle) {
	t.Helper()
	ctx := context.Background()
	env, err := b.e.NewEnvelope("placed-muller", orders.OrderPlaced{OrderID: nfdKey, Items: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.e.Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
	eventually(t, "order Müller-1 to be applied", func() bool { return b.e.Stats().Applied >= 1 })
	now := time.Now().UTC()
	uow, err := b.st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	d := idem.Envelope{ID: "paid-muller", Type: "orders.PaymentReceived", Body: []byte(`{`)}
	if err := uow.Commit(ctx, &store.Changes{DeadLetters: []store.DeadLetter{{ID: d.ID, Envelope: d, Reason: "malformed_body", Error: "decode",
		SagaType: "order", Key: nfcKey, Attempts: 1, FirstFailedAt: now, LastFailedAt: now}}}); err != nil {
		t.Fatal(err)
	}
}

// Every endpoint that takes a saga key or a key prefix accepts every
// spelling the engine accepts: the NFD spelling finds the NFC key.
func TestAPIKeysInAnyUnicodeSpelling(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seedMuller(t, b)
	nfd := url.PathEscape(nfdKey)

	var list admin.SagaList
	b.getJSON(t, "/api/sagas?prefix="+url.QueryEscape("Mu\u0308"), &list)
	if len(list.Sagas) != 1 || list.Sagas[0].Key != nfcKey {
		t.Errorf("GET /api/sagas?prefix=Mü (NFD): %+v, want Müller-1", list.Sagas)
	}
	b.getJSON(t, "/api/sagas?type=order&status=active&prefix="+url.QueryEscape(" Mu\u0308ll"), &list)
	if len(list.Sagas) != 1 {
		t.Errorf("GET /api/sagas?prefix= Müll (NFD, leading space): %+v, want Müller-1", list.Sagas)
	}
	var saga admin.Saga
	b.getJSON(t, "/api/sagas/order/"+nfd, &saga)
	if saga.Saga.Key != nfcKey {
		t.Errorf("GET /api/sagas/order/<NFD>: key %q", saga.Saga.Key)
	}
	var timers admin.TimerList
	b.getJSON(t, "/api/timers?type=order&key="+url.QueryEscape(nfdKey), &timers)
	if len(timers.Timers) != 1 {
		t.Errorf("GET /api/timers?key=<NFD>: %+v, want the order's timer", timers.Timers)
	}
	b.getJSON(t, "/api/timers?key="+url.QueryEscape(nfdKey), &timers)
	if len(timers.Timers) != 1 {
		t.Errorf("GET /api/timers?key=<NFD> without type: %+v, want the order's timer", timers.Timers)
	}
	var dls admin.DeadLetterList
	b.getJSON(t, "/api/dead-letters?key="+url.QueryEscape(nfdKey), &dls)
	if len(dls.DeadLetters) != 1 {
		t.Errorf("GET /api/dead-letters?key=<NFD>: %+v, want the dead letter of Müller-1", dls.DeadLetters)
	}
	var counts admin.DeadLetterCounts
	b.getJSON(t, "/api/dead-letters/counts?key="+url.QueryEscape(nfdKey), &counts)
	if counts.Total != 1 {
		t.Errorf("GET /api/dead-letters/counts?key=<NFD>: %+v, want 1", counts)
	}
	if code, body := b.do(t, http.MethodPost, "/api/timers/order/"+nfd+"/overdue/reschedule", `{"in":"1h"}`); code != http.StatusOK {
		t.Errorf("reschedule the timer of <NFD>: %d %s", code, body)
	}
	if code, body := b.do(t, http.MethodDelete, "/api/timers/order/"+nfd+"/overdue", ""); code != http.StatusOK {
		t.Errorf("cancel the timer of <NFD>: %d %s", code, body)
	}
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Next-page cursors are shell-safe base64url tokens, and a malformed one
// is a 400 naming it.
func TestAPICursorsAreOpaqueTokens(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)

	pages := func(path string, next func(string) (string, []string)) []string {
		t.Helper()
		var all []string
		cursor := ""
		for range 20 {
			p := path
			if cursor != "" {
				p += "&after=" + cursor // unescaped on purpose: the token needs no escaping
			}
			c, keys := next(p)
			all = append(all, keys...)
			if c == "" {
				return all
			}
			if !shellSafe.MatchString(c) {
				t.Fatalf("GET %s: next %q is not a shell-safe token", p, c)
			}
			cursor = c
		}
		t.Fatalf("GET %s: more than 20 pages", path)
		return nil
	}
	sagas := func(p string) (string, []string) {
		var l admin.SagaList
		b.getJSON(t, p, &l)
		var ks []string
		for _, s := range l.Sagas {
			ks = append(ks, s.SagaType+"/"+s.Key)
		}
		return l.Next, ks
	}
	for _, path := range []string{"/api/sagas?limit=2", "/api/sagas?type=order&limit=2", "/api/sagas?type=order&prefix=o-&limit=1"} {
		keys := pages(path, sagas)
		want := 5
		if strings.Contains(path, "prefix") {
			want = 3
		}
		if len(keys) != want {
			t.Errorf("%s: paged through %v, want %d sagas", path, keys, want)
		}
	}
	timers := pages("/api/timers?limit=2", func(p string) (string, []string) {
		var l admin.TimerList
		b.getJSON(t, p, &l)
		var ks []string
		for _, tm := range l.Timers {
			ks = append(ks, tm.Key)
		}
		return l.Next, ks
	})
	if len(timers) != 5 {
		t.Errorf("timers: paged through %v, want 5", timers)
	}

	for _, path := range []string{"/api/sagas?after=", "/api/sagas?type=order&after=", "/api/sagas?prefix=o&after=", "/api/timers?after="} {
		for _, bad := range []string{"order%00o-1", "%21%21", "bm90IGpzb24"} {
			code, body := b.do(t, http.MethodGet, path+bad, "")
			if code != http.StatusBadRequest || !strings.Contains(body, "cursor") {
				t.Errorf("GET %s%s: %d %s, want 400 naming the cursor", path, bad, code, body)
			}
		}
	}
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// userFields hold names that are data, not the API's: a saga's state
// document, message headers, business attributes, bodies and timer names.
var userFields = map[string]bool{"data": true, "headers": true, "attributes": true, "body": true, "timers": true}

// checkSnake reports every object member name in v that is not snake_case.
func checkSnake(t *testing.T, where string, v any) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if !snakeCase.MatchString(k) {
				t.Errorf("%s: member %q is not snake_case", where, k)
			}
			if !userFields[k] {
				checkSnake(t, where+"."+k, x)
			}
		}
	case []any:
		for _, x := range v {
			checkSnake(t, where+"[]", x)
		}
	}
}

// Every answer of the API names its members in snake_case.
func TestAPIUsesSnakeCase(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	seedMuller(t, b)
	for _, path := range []string{
		"/api/sagas", "/api/sagas?prefix=o", "/api/sagas/order/o-1", "/api/saga-types", "/api/overview",
		"/api/dead-letters", "/api/dead-letters?reason=unknown_type", "/api/dead-letters/inv-1", "/api/dead-letters/counts",
		"/api/timers", "/api/schedules", "/healthz",
	} {
		code, body := b.do(t, http.MethodGet, path, "")
		var v any
		if code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		checkSnake(t, path, v)
	}
	code, body := b.do(t, http.MethodPost, "/api/messages", `{"id":"p-9","type":"orders.OrderPlaced","body":{"OrderID":"o-9","Items":1}}`)
	var v any
	if code != http.StatusAccepted || json.Unmarshal([]byte(body), &v) != nil {
		t.Fatalf("POST /api/messages: %d %s", code, body)
	}
	checkSnake(t, "POST /api/messages", v)
}

// A key's timers page like every timer: the next cursor of
// /api/timers?key= is accepted back, and a malformed one is a 400.
func TestAPITimersOfOneKeyPage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	var c store.Changes
	// Due in an hour or more: the engine behind the API fires a due
	// timer (and deletes it) while the test reads.
	for i, name := range []string{"n0", "n1", "n2"} {
		c.Timers = append(c.Timers, store.Timer{SagaType: "po", Key: "K", Name: name, DueAt: now.Add(time.Duration(i+1) * time.Hour),
			Envelope: idem.Envelope{ID: "t-" + name, Type: "T", Body: []byte(`{}`)}})
	}
	uow, err := b.st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &c); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/api/timers?type=po&key=K&limit=2", "/api/timers?key=K&limit=2"} {
		var l admin.TimerList
		b.getJSON(t, path, &l)
		if len(l.Timers) != 2 || l.Next == "" {
			t.Fatalf("GET %s: %+v, want 2 timers and a next cursor", path, l)
		}
		p := path + "&after=" + l.Next
		l = admin.TimerList{}
		b.getJSON(t, p, &l)
		if len(l.Timers) != 1 || l.Timers[0].Name != "n2" || l.Next != "" {
			t.Errorf("GET %s: %+v, want timer n2 and no next cursor", p, l)
		}
		for _, bad := range []string{"po%00K", "%21%21", "bm90IGpzb24", "%3Cscript%3E"} {
			code, body := b.do(t, http.MethodGet, path+"&after="+bad, "")
			if code != http.StatusBadRequest || !strings.Contains(body, "cursor") {
				t.Errorf("GET %s&after=%s: %d %s, want 400 naming the cursor", path, bad, code, body)
			}
		}
	}
}

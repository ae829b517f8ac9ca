package admin_test

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

// paymentType is the order saga's PaymentReceived message type.
func paymentType(t *testing.T, b *bundle) string {
	t.Helper()
	env, err := b.e.NewEnvelope("x", orders.PaymentReceived{OrderID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	return env.Type
}

// An event sent to a saga through the API is applied, and its journal
// entry names who sent it; an event whose body correlates to another saga,
// or of a type the saga does not take, is refused before it is sent.
func TestAPISendEventToSaga(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	pay := paymentType(t, b)
	refused := []struct {
		body string
		want int
		text string
	}{
		{`{"type":"` + pay + `","body":{"OrderID":"o-2","Amount":5}}`, http.StatusBadRequest, `correlates to saga key`},
		{`{"type":"billing.InvoiceSent","body":{}}`, http.StatusBadRequest, "takes no message of type"},
		{`{"type":"` + pay + `","body":{"OrderID":1}}`, http.StatusBadRequest, "does not fit"},
	}
	for _, r := range refused {
		if code, body := b.do(t, "POST", "/api/sagas/order/o-1/events", r.body); code != r.want || !strings.Contains(body, r.text) {
			t.Errorf("POST events %s: %d %s; want %d containing %q", r.body, code, body, r.want, r.text)
		}
	}
	code, body := b.do(t, "POST", "/api/sagas/order/o-1/events", `{"id":"pay-o-1","type":"`+pay+`","body":{"OrderID":"o-1","Amount":5}}`, admin.ActorHeader, "alice <script>")
	if code != http.StatusAccepted {
		t.Fatalf("POST events: %d %s", code, body)
	}
	k := store.Key{SagaType: "order", Key: "o-1"}
	eventually(t, "the payment to be applied", func() bool {
		in, err := loadInstance(b, "o-1")
		return err == nil && in != nil && in.State == "Shipped"
	})
	journal, err := b.st.Journal(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	last := journal[len(journal)-1]
	if last.EventType != pay || last.Actor != "api (loopback): alice <script>" {
		t.Errorf("last journal entry: %s by %q; want %s by %q", last.EventType, last.Actor, pay, "api (loopback): alice <script>")
	}
	if code, body := b.do(t, "POST", "/api/sagas/order/o-2/events", `{"type":"`+pay+`","body":{"OrderID":"o-2","Amount":5}}`, admin.ActorHeader, "bob\u200b"); code != http.StatusBadRequest {
		t.Errorf("an invisible character in %s: %d %s; want 400", admin.ActorHeader, code, body)
	}
	if code, body := b.do(t, "POST", "/api/sagas/order/o-2/events", `{"type":"`+pay+`","body":{"OrderID":"o-2","Amount":5}}`, admin.ActorHeader, strings.Repeat("a", 101)); code != http.StatusBadRequest {
		t.Errorf("101 bytes in %s: %d %s; want 400", admin.ActorHeader, code, body)
	}
}

// A saga ended through the API is in saga.Ended with its timers gone, a
// payment that arrives afterwards is ignored, and the refusals say why.
func TestAPIEndSaga(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	for _, r := range []struct{ path, body, text string }{
		{"/api/sagas/order/o-3/end", `{"reason":""}`, "a reason is required"},
		{"/api/sagas/order/absent/end", `{"reason":"r"}`, "no saga order"},
		{"/api/sagas/order/o-3/end", `{"reason":"r","version":9}`, "changed meanwhile"},
	} {
		if code, body := b.do(t, "POST", r.path, r.body); code < 400 || !strings.Contains(body, r.text) {
			t.Errorf("POST %s %s: %d %s; want an error containing %q", r.path, r.body, code, body, r.text)
		}
	}
	if n := timerCount(t, b, "o-3"); n != 1 {
		t.Fatalf("o-3 holds %d timers before it is ended; want its overdue timer", n)
	}
	code, body := b.do(t, "POST", "/api/sagas/order/o-3/end", `{"reason":"customer asked by phone"}`)
	if code != http.StatusOK {
		t.Fatalf("POST end: %d %s", code, body)
	}
	var entry store.JournalEntry
	if err := json.Unmarshal([]byte(body), &entry); err != nil || entry.EventType != inspect.EndEventType || entry.Actor != "api (loopback)" {
		t.Errorf("POST end answered %s (%v); want the journal entry of the end by api (loopback)", body, err)
	}
	in, err := loadInstance(b, "o-3")
	if err != nil || in.State != string(saga.Ended) || in.Status() != store.StatusFinished {
		t.Fatalf("o-3 after the end: %+v, %v; want finished in %s", in, err, saga.Ended)
	}
	if n := timerCount(t, b, "o-3"); n != 0 {
		t.Errorf("o-3 holds %d timers after it was ended; want none", n)
	}
	if code, body := b.do(t, "POST", "/api/sagas/order/o-3/end", `{"reason":"again"}`); code != http.StatusConflict || !strings.Contains(body, "finished already") {
		t.Errorf("ending it again: %d %s; want 409 finished already", code, body)
	}
	ignored := b.e.Stats().Ignored
	env, err := b.e.NewEnvelope("late-pay-o-3", orders.PaymentReceived{OrderID: "o-3", Amount: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.e.Publish(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the late payment to be ignored", func() bool { return b.e.Stats().Ignored > ignored })
	if in, err := loadInstance(b, "o-3"); err != nil || in.State != string(saga.Ended) {
		t.Errorf("o-3 after a late payment: %+v, %v; want still %s", in, err, saga.Ended)
	}
}

// The console's end and send forms ask first, act on yes, and are
// refused in read-only mode.
func TestConsoleActionsAskFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	br := newBrowser(t, b)
	resp, page := br.post("/instances/order/o-2/end", url.Values{"reason": {"duplicate order"}, "version": {"1"}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `id="confirm-action"`) || !strings.Contains(page, "duplicate order") || strings.Contains(page, `id="confirm-moved"`) {
		t.Fatalf("end without confirm: %d; want the instance page asking, with the reason:\n%.600s", resp.StatusCode, page)
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		t.Errorf("the question is a redirect to %q: the reason would reach the URL", loc)
	}
	if in, _ := loadInstance(b, "o-2"); in.State == string(saga.Ended) {
		t.Fatal("the saga was ended before the question was answered")
	}
	// Pressed on a version the saga has left: the question says so.
	if _, page := br.post("/instances/order/o-2/end", url.Values{"reason": {"r"}, "version": {"7"}}); !strings.Contains(page, `id="confirm-moved"`) {
		t.Errorf("end pressed at a stale version: the question does not say the saga moved on:\n%.600s", page)
	}
	resp, _ = br.post("/instances/order/o-2/end", url.Values{"reason": {"duplicate order"}, "version": {"1"}, "confirm": {"yes"}})
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "done=ended") {
		t.Fatalf("end confirmed: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if in, _ := loadInstance(b, "o-2"); in.State != string(saga.Ended) {
		t.Errorf("o-2 after a confirmed end: state %q; want %s", in.State, saga.Ended)
	}

	ro := setup(t, &admin.Config{ReadOnly: true})
	seed(t, ro)
	robr := newBrowser(t, ro)
	resp, _ = robr.post("/instances/order/o-1/end", url.Values{"reason": {"r"}, "version": {"1"}, "confirm": {"yes"}})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("end on a read-only console: %d; want 403", resp.StatusCode)
	}
	if code, _ := ro.do(t, "POST", "/api/sagas/order/o-1/end", `{"reason":"r"}`); code != http.StatusForbidden {
		t.Errorf("API end on a read-only server: %d; want 403", code)
	}
	if _, page := robr.get("/instances/order/o-1"); strings.Contains(page, `id="end-form"`) {
		t.Error("a read-only console shows the end form")
	}
}

// A batch end runs on the set it counted: a digest from before a new saga
// matched is refused, and the recount's digest ends exactly the sagas
// counted.
func TestAPIEndSagasByFilter(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	const filter = "?type=order&prefix=o-"
	var sel struct {
		Count  int    `json:"count"`
		Digest string `json:"digest"`
	}
	b.getJSON(t, "/api/sagas/select"+filter, &sel)
	if sel.Count != 3 || sel.Digest == "" {
		t.Fatalf("select %s: %+v; want o-1, o-2 and o-3 with a digest", filter, sel)
	}
	env, err := b.e.NewEnvelope("placed-o-4", orders.OrderPlaced{OrderID: "o-4", Items: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.e.Publish(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	eventually(t, "o-4 to exist", func() bool { in, err := loadInstance(b, "o-4"); return err == nil && in != nil })
	code, body := b.do(t, "POST", "/api/sagas/end"+filter, `{"reason":"test orders","digest":"`+sel.Digest+`"}`)
	var res inspect.BatchResult
	if code != http.StatusOK || json.Unmarshal([]byte(body), &res) != nil || res.Done != 3 {
		t.Fatalf("end with the digest of before o-4: %d %s; want the 3 counted ended", code, body)
	}
	if in, _ := loadInstance(b, "o-4"); in.State == string(saga.Ended) {
		t.Fatal("the batch ended o-4, which matched only after the count")
	}
	b.getJSON(t, "/api/sagas/select"+filter, &sel)
	code, body = b.do(t, "POST", "/api/sagas/end"+filter, `{"reason":"test orders","digest":"`+sel.Digest+`"}`)
	if code != http.StatusOK || json.Unmarshal([]byte(body), &res) != nil || res.Done != 1 || sel.Count != 1 {
		t.Fatalf("end with the recount's digest: %d %s (counted %d); want o-4 done", code, body, sel.Count)
	}
	for _, k := range []string{"o-1", "o-2", "o-3", "o-4"} {
		if in, _ := loadInstance(b, k); in.State != string(saga.Ended) {
			t.Errorf("%s after the batch: %q; want %s", k, in.State, saga.Ended)
		}
	}
	if in, _ := loadInstance(b, "x-9"); in.State == string(saga.Ended) {
		t.Error("the batch ended x-9, which its filter does not select")
	}
}

// The console's send question carries the message ID: confirming it twice
// sends one message, applied once.
func TestConsoleSendConfirmedTwiceSendsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	pay := paymentType(t, b)
	br := newBrowser(t, b)
	form := url.Values{"type": {pay}, "body": {`{"OrderID":"o-1","Amount":3}`}}
	_, page := br.post("/instances/order/o-1/send", form)
	i := strings.Index(page, `name="id" value="`)
	if i < 0 {
		t.Fatalf("the send question carries no message ID:\n%.600s", page)
	}
	id := page[i+len(`name="id" value="`):]
	id = id[:strings.IndexByte(id, '"')]
	form.Set("id", id)
	form.Set("confirm", "yes")
	for range 2 {
		if resp, _ := br.post("/instances/order/o-1/send", form); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("confirmed send: %d", resp.StatusCode)
		}
	}
	eventually(t, "o-1 to be paid", func() bool { in, err := loadInstance(b, "o-1"); return err == nil && in.State == "Shipped" })
	eventually(t, "the second copy to be skipped", func() bool { return b.e.Stats().Duplicates >= 1 })
	journal, err := b.st.Journal(t.Context(), store.Key{SagaType: "order", Key: "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, j := range journal {
		if j.EventType == pay {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the payment is journaled %d times; want once", n)
	}
}

// The question an unconfirmed action answers with lives at the instance
// page's address (mounted under a prefix too): its links, the timers'
// "back" included, carry neither the action's path nor the reason.
func TestConsoleActionQuestionAtTheInstanceAddress(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	br := newBrowser(t, b)
	resp, page := br.post("/instances/order/o-2/end", url.Values{"reason": {"secret reason"}, "version": {"1"}})
	if got := resp.Header.Get("HX-Replace-Url"); got != "/instances/order/o-2" {
		t.Errorf("HX-Replace-Url %q; want the instance page's address", got)
	}
	if !strings.Contains(page, `id="confirm-action"`) {
		t.Fatalf("no question:\n%.400s", page)
	}
	for _, bad := range []string{"/o-2/end?", "reason=secret", `name="back" value="/instances/order/o-2/end`} {
		if strings.Contains(page, bad) {
			t.Errorf("the question page carries %q in a link or form", bad)
		}
	}
	if !strings.Contains(page, `href="/assets/console.css"`) {
		t.Errorf("the question page's links do not start at the console's root:\n%.400s", page)
	}
}

// A batch end's time range (from, to on updated_at, as the instance list
// takes it) selects in the count and in the end alike: a digest counted
// over one range does not end the sagas of another, and a range that is no
// time is refused naming the parameter.
func TestAPIEndSagasByTimeRange(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	var sel struct {
		Count  int    `json:"count"`
		Digest string `json:"digest"`
	}
	const filter = "/api/sagas/select?type=order&prefix=o-"
	b.getJSON(t, filter+"&from=2000-01-01", &sel)
	if sel.Count != 3 {
		t.Fatalf("select from 2000: %d sagas; want o-1, o-2 and o-3", sel.Count)
	}
	all := sel.Digest
	for _, r := range []string{"&from=2999-01-01", "&to=2000-01-01"} {
		b.getJSON(t, filter+r, &sel)
		if sel.Count != 0 {
			t.Errorf("select %s: %d sagas; want none: the range selects no saga", r, sel.Count)
		}
	}
	code, body := b.do(t, "POST", "/api/sagas/end?type=order&prefix=o-&from=2999-01-01", `{"reason":"r","digest":"`+all+`"}`)
	if code != http.StatusConflict {
		t.Errorf("end from 2999 with the digest counted from 2000: %d %s; want 409", code, body)
	}
	if in, _ := loadInstance(b, "o-1"); in.State == string(saga.Ended) {
		t.Fatal("a batch over a range that selects no saga ended o-1")
	}
	for _, p := range []string{"from", "to"} {
		for _, path := range []string{filter, "/api/sagas/end?type=order"} {
			method, body := "GET", ""
			if strings.HasPrefix(path, "/api/sagas/end") {
				method, body = "POST", `{"reason":"r","digest":"`+all+`"}`
			}
			if code, text := b.do(t, method, path+"&"+p+"=yesterday", body); code != http.StatusBadRequest || !strings.Contains(text, "parameter "+p+":") {
				t.Errorf("%s %s with %s=yesterday: %d %s; want 400 naming parameter %s", method, path, p, code, text, p)
			}
		}
	}
}

// A batch acts on active sagas: status=finished, which would select none
// of them, is refused rather than replaced by status=active.
func TestAPISelectSagasRefusesFinished(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	if code, body := b.do(t, "GET", "/api/sagas/select?type=order&status=finished", ""); code != http.StatusBadRequest || !strings.Contains(body, "parameter status") {
		t.Errorf("select status=finished: %d %s; want 400 naming parameter status", code, body)
	}
}

// The send form's textarea, pre-filled with the body the question carried,
// holds it as it is: a right-to-left mark (ordinary in Hebrew or Arabic
// data) is not rewritten as the visible [U+200F] the page shows elsewhere,
// so editing and sending again sends what was there.
func TestConsoleSendFormKeepsBidiMarks(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	br := newBrowser(t, b)
	body := "{\"OrderID\":\"o-1\",\"Amount\":3,\"Note\":\"\u05e9\u05dc\u05d5\u05dd\u200f \u202bx\u202c\"}"
	_, page := br.post("/instances/order/o-1/send", url.Values{"type": {paymentType(t, b)}, "body": {body}})
	const open = `id="send-body" rows="4" class="mono" required>`
	i := strings.Index(page, open)
	j := strings.Index(page, "</textarea>")
	if i < 0 || j < i {
		t.Fatalf("no pre-filled send form:\n%.600s", page)
	}
	if got := html.UnescapeString(page[i+len(open) : j]); got != body {
		t.Errorf("the send form's textarea holds %+q; want the body %+q as it is", got, body)
	}
}

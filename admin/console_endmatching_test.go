package admin_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

// batchDigest returns the digest the batch end's question carries.
func batchDigest(t *testing.T, page string) string {
	t.Helper()
	i := strings.Index(page, `name="digest" value="`)
	if i < 0 {
		t.Fatalf("the question carries no digest:\n%.800s", page)
	}
	d := page[i+len(`name="digest" value="`):]
	return d[:strings.IndexByte(d, '"')]
}

// The instance list's "End all matching…" counts the filter's active
// sagas, asks with the count, and ends exactly that set; a set that
// changed since the count is refused with nothing ended.
func TestConsoleBatchEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	br := newBrowser(t, b)
	if _, page := br.get("/instances"); strings.Contains(page, `id="batch-end"`) {
		t.Error("the unfiltered list offers to end all matching")
	}
	if _, page := br.get("/instances?type=order&prefix=o-&status=finished"); strings.Contains(page, `id="batch-end"`) {
		t.Error("the list of finished sagas offers to end them")
	}
	if _, page := br.get("/instances?type=order&prefix=o-"); !strings.Contains(page, `id="batch-end"`) {
		t.Fatal("the filtered list does not offer End all matching")
	}
	code, page := br.get("/instances/end?type=order&prefix=o-&attr=")
	if code != http.StatusOK || !strings.Contains(page, `<b id="batch-end-count">3</b>`) {
		t.Fatalf("the question: %d; want the count 3 (o-1, o-2, o-3):\n%.1200s", code, page)
	}
	digest := batchDigest(t, page)
	form := url.Values{"type": {"order"}, "prefix": {"o-"}, "digest": {digest}, "reason": {"test orders"}, "confirm": {"yes"}}

	// A new saga matches after the count: refused, nothing ended.
	env, err := b.e.NewEnvelope("placed-o-4", orders.OrderPlaced{OrderID: "o-4", Items: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.e.Publish(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	eventually(t, "o-4 to exist", func() bool { in, err := loadInstance(b, "o-4"); return err == nil && in != nil })
	if resp, _ := br.post("/instances/end", url.Values{"type": {"order"}, "prefix": {"o-"}, "digest": {digest}, "confirm": {"yes"}}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("end without a reason: %d; want 400", resp.StatusCode)
	}
	if in, _ := loadInstance(b, "o-1"); in.State == string(saga.Ended) {
		t.Fatal("a refused batch ended o-1")
	}
	// The count ends what it counted: o-4, which matches only since, is
	// not ended; the recount then selects it alone.
	resp, _ := br.post("/instances/end", form)
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "done=3") {
		t.Fatalf("end with the count of before o-4: %d to %q; want 3 ended", resp.StatusCode, resp.Header.Get("Location"))
	}
	if in, _ := loadInstance(b, "o-4"); in.State == string(saga.Ended) {
		t.Fatal("the batch ended o-4, which matched only after the count")
	}

	_, page = br.get("/instances/end?type=order&prefix=o-")
	form.Set("digest", batchDigest(t, page))
	resp, _ = br.post("/instances/end", form)
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "done=1") {
		t.Fatalf("end with the recount: %d to %q; want a redirect saying 1 (o-4) ended", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, k := range []string{"o-1", "o-2", "o-3", "o-4"} {
		if in, _ := loadInstance(b, k); in.State != string(saga.Ended) {
			t.Errorf("%s after the batch: %q; want %s", k, in.State, saga.Ended)
		}
	}
	if in, _ := loadInstance(b, "x-9"); in.State == string(saga.Ended) {
		t.Error("the batch ended x-9, which its filter does not select")
	}
	journal, err := b.st.Journal(t.Context(), store.Key{SagaType: "order", Key: "o-1"})
	if err != nil || !strings.HasPrefix(journal[len(journal)-1].Actor, "console") {
		t.Errorf("o-1's last journal entry: %v; want the end by the console", err)
	}
	if _, page := br.get(resp.Header.Get("Location")); !strings.Contains(page, "1 saga(s) ended") || !strings.Contains(page, `id="batch-end-none"`) {
		t.Errorf("the page after the end does not say 1 ended and none left:\n%.1200s", page)
	}

	// Refusals: no filter, finished sagas, a hostile filter shown as text.
	for path, want := range map[string]int{"/instances/end": 400, "/instances/end?status=active": 400, "/instances/end?type=order&status=finished": 400, "/instances/end?type=order&from=nope": 400} {
		if code, _ := br.get(path); code != want {
			t.Errorf("GET %s: %d; want %d", path, code, want)
		}
	}
	if _, page := br.get("/instances/end?prefix=" + url.QueryEscape("<script>")); strings.Contains(page, "<script>") || !strings.Contains(page, "&lt;script&gt;") {
		t.Errorf("a hostile prefix is not escaped on the question:\n%.1200s", page)
	}

	ro := setup(t, &admin.Config{ReadOnly: true})
	seed(t, ro)
	robr := newBrowser(t, ro)
	if _, page := robr.get("/instances?type=order"); strings.Contains(page, `id="batch-end"`) {
		t.Error("a read-only console offers End all matching")
	}
	if code, _ := robr.get("/instances/end?type=order"); code != http.StatusForbidden {
		t.Errorf("the question on a read-only console: %d; want 403", code)
	}
	if resp, _ := robr.post("/instances/end", url.Values{"type": {"order"}, "digest": {digest}, "reason": {"r"}, "confirm": {"yes"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("the end on a read-only console: %d; want 403", resp.StatusCode)
	}
}

// bump applies a change to saga key as an event would (its version moves
// on), leaving it active.
func bump(t *testing.T, b *bundle, key string) {
	t.Helper()
	in, err := loadInstance(b, key)
	if err != nil || in == nil {
		t.Fatalf("load %s: %v", key, err)
	}
	uow, err := b.st.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = uow.Rollback(t.Context()) }()
	in.UpdatedAt = time.Now().UTC()
	if err := uow.Commit(t.Context(), &store.Changes{Updates: []*store.Instance{in}}); err != nil {
		t.Fatal(err)
	}
}

// The binding of a batch end is the set counted: a saga of it that moved
// on since the count is skipped, one that finished is left alone, one
// that matches only after the count is not ended, and the rest are ended;
// the page says how many were skipped. A confirmation of another filter
// is refused with the question again, filter and reason kept.
func TestConsoleBatchEndSkipsWhatChanged(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	br := newBrowser(t, b)
	_, page := br.get("/instances/end?type=order&prefix=o-")
	form := url.Values{"type": {"order"}, "prefix": {"o-"}, "digest": {batchDigest(t, page)}, "reason": {"busy <b>filter</b>"}, "confirm": {"yes"}}
	bump(t, b, "o-1")
	if _, err := inspect.EndSaga(t.Context(), b.st, store.Key{SagaType: "order", Key: "o-3"}, &inspect.End{Reason: "by hand", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	env, err := b.e.NewEnvelope("placed-o-4", orders.OrderPlaced{OrderID: "o-4", Items: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.e.Publish(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	eventually(t, "o-4 to exist", func() bool { in, err := loadInstance(b, "o-4"); return err == nil && in != nil })

	wrong := url.Values{"type": {"order"}, "prefix": {"o-2"}, "digest": form["digest"], "reason": form["reason"], "confirm": {"yes"}}
	resp, page := br.post("/instances/end", wrong)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(page, `id="batch-end-refused"`) || !strings.Contains(page, `value="busy &lt;b&gt;filter&lt;/b&gt;"`) ||
		!strings.Contains(page, `<input type="hidden" name="prefix" value="o-2">`) {
		t.Errorf("a confirmation of another filter: %d; want 409 with the question again, the filter and the reason kept:\n%.1500s", resp.StatusCode, page)
	}
	resp, _ = br.post("/instances/end", form)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "done=1") || !strings.Contains(loc, "skipped=1") || !strings.Contains(loc, "gone=1") {
		t.Fatalf("end after one moved on, one finished and one joined: %d to %q; want 1 done, 1 skipped, 1 gone", resp.StatusCode, loc)
	}
	if _, page := br.get(loc); !strings.Contains(page, "1 skipped: an event was applied to them since the count") {
		t.Errorf("the page after the end does not say one was skipped")
	}
	for k, want := range map[string]bool{"o-1": false, "o-2": true, "o-4": false} {
		if in, _ := loadInstance(b, k); (in.State == string(saga.Ended)) != want {
			t.Errorf("%s after the batch: %q; want ended %v", k, in.State, want)
		}
	}
}

package admin_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
)

// record commits dead letters straight to the store, as an engine would.
func record(t *testing.T, b *bundle, dls ...store.DeadLetter) {
	t.Helper()
	ctx := context.Background()
	uow, err := b.st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	if err := uow.Commit(ctx, &store.Changes{DeadLetters: dls}); err != nil {
		t.Fatal(err)
	}
}

// unknownType is a dead letter of a message type nothing consumes.
func unknownType(id string, at time.Time) store.DeadLetter {
	e := idem.Envelope{ID: id, Type: "billing.InvoiceSent", Body: []byte(`{"invoice":"` + id + `"}`)}
	return store.DeadLetter{ID: id, Envelope: e, Reason: "unknown_type", Error: "no saga or handler consumes billing.InvoiceSent",
		Attempts: 1, FirstFailedAt: at, LastFailedAt: at}
}

func getDeadLetter(t *testing.T, b *bundle, id string) admin.DeadLetter {
	t.Helper()
	var d admin.DeadLetter
	b.getJSON(t, "/api/dead-letters/"+url.PathEscape(id), &d)
	return d
}

// A replay re-queues; the dead letter keeps its first failure and records
// each replay's outcome: failed again (the same ID dead-lettered again) or
// succeeded (consumed without failing).
func TestReplayKeepsHistory(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	before := getDeadLetter(t, b, "inv-1")

	code, body := b.do(t, http.MethodPost, "/api/dead-letters/replay?reason=unknown_type", "")
	if code != http.StatusOK || !strings.Contains(body, `"done":2`) || !strings.Contains(body, "re-queued") || strings.Contains(body, "will apply") {
		t.Fatalf("bulk replay: %d %s; want 2 done, said to be re-queued, not applied", code, body)
	}
	var d admin.DeadLetter
	eventually(t, "inv-1 to fail again", func() bool {
		d = getDeadLetter(t, b, "inv-1")
		return len(d.Replays) == 1 && d.Replays[0].Outcome == store.ReplayFailed
	})
	if !d.FirstFailedAt.Equal(before.FirstFailedAt) || d.FirstReason != "unknown_type" {
		t.Errorf("failed again: first failed %v (%q), want the first failure kept: %v (unknown_type)", d.FirstFailedAt, d.FirstReason, before.FirstFailedAt)
	}
	if r := d.Replays[0]; r.Reason != "unknown_type" || r.SettledAt.Before(r.At) || !strings.HasPrefix(d.History, "replayed once; failed again at ") {
		t.Errorf("failed again: replay %+v, history %q; want unknown_type, settled after it began, and said", r, d.History)
	}

	// The one whose cause is gone is consumed: succeeded.
	code, body = b.do(t, http.MethodPost, "/api/dead-letters/placed-o-dead/replay", "")
	if code != http.StatusAccepted || !strings.Contains(body, `"requeued":"placed-o-dead"`) || !strings.Contains(body, `"outcome":"pending"`) {
		t.Fatalf("replay placed-o-dead: %d %s; want 202, re-queued, pending", code, body)
	}
	eventually(t, "placed-o-dead's replay to succeed", func() bool {
		d = getDeadLetter(t, b, "placed-o-dead")
		return len(d.Replays) == 1 && d.Replays[0].Outcome == store.ReplaySucceeded
	})
	if !strings.Contains(d.History, "succeeded") {
		t.Errorf("history %q: want it to say the replay succeeded", d.History)
	}
	var saga admin.Saga
	b.getJSON(t, "/api/sagas/order/o-dead", &saga)
}

var asOfRE = regexp.MustCompile(`name="as_of" value="([^"]*)"`)

// A bulk action acts on the dead letters counted, not on one that arrived
// between the count and the confirmation: through the API (as_of) and
// through the console's confirm form.
func TestBulkActsOnWhatWasCounted(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	now := time.Now().UTC()

	var counts admin.DeadLetterCounts
	b.getJSON(t, "/api/dead-letters/counts?reason=unknown_type", &counts)
	if counts.Total != 2 || counts.AsOf == "" {
		t.Fatalf("counts: %+v, want 2 and a mark", counts)
	}
	record(t, b, unknownType("inv-late-api", now))
	code, body := b.do(t, http.MethodPost, "/api/dead-letters/replay?reason=unknown_type&as_of="+url.QueryEscape(counts.AsOf), "")
	if code != http.StatusOK || !strings.Contains(body, `"done":2`) {
		t.Fatalf("replay as of the count: %d %s; want 2 done", code, body)
	}
	if d := getDeadLetter(t, b, "inv-late-api"); len(d.Replays) != 0 {
		t.Errorf("inv-late-api arrived after the count: replays %+v, want none", d.Replays)
	}
	// The replayed ones fail again (nothing consumes their type): let them,
	// before the next count.
	eventually(t, "inv-1 and inv-2 to fail again", func() bool {
		for _, id := range []string{"inv-1", "inv-2"} {
			if r := getDeadLetter(t, b, id).Replays; len(r) != 1 || r[0].Outcome != store.ReplayFailed {
				return false
			}
		}
		return true
	})

	// The console: count on the confirm page, a late arrival, confirm.
	br := newBrowser(t, b)
	// (The console purges only archived dead letters: archive is its bulk
	// action on these.)
	code, page := br.get("/dead-letters?reason=unknown_type&confirm=archive")
	m := asOfRE.FindStringSubmatch(page)
	if code != http.StatusOK || m == nil || m[1] == "" || !strings.Contains(page, "Archive 3 dead letter(s)?") {
		t.Fatalf("confirm page: %d, mark %v; want 200, Archive 3 and a hidden as_of", code, m)
	}
	record(t, b, unknownType("inv-late-console", now))
	resp, _ := br.post("/dead-letters/bulk", url.Values{"action": {"archive"}, "confirm": {"yes"}, "reason": {"unknown_type"}, "as_of": {m[1]}})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "n=3") {
		t.Fatalf("archive: %d to %q, want 303 with n=3", resp.StatusCode, loc)
	}
	b.getJSON(t, "/api/dead-letters/counts?reason=unknown_type", &counts)
	if counts.Total != 1 {
		t.Errorf("after archiving: %d unknown_type not archived, want 1 (inv-late-console, which arrived after the count)", counts.Total)
	}
	// A purge confirmed without the cutoff its question carried is refused.
	resp, _ = br.post("/dead-letters/bulk", url.Values{"action": {"purge"}, "confirm": {"yes"}, "archived": {"only"}, "as_of": {m[1]}})
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("purge confirmed without archived_before: %d, want 400", resp.StatusCode)
	}
	getDeadLetter(t, b, "inv-late-console")
}

func TestConsoleDeadLetterPage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	now := time.Now().UTC()
	text := unknownType("text-body", now)
	text.Envelope.Body = []byte(`{"search_id": 7, <b>`) // not JSON
	text.SagaType, text.Key = "order", "o-1"            // a saga that exists
	record(t, b, text)
	br := newBrowser(t, b)

	_, page := br.get("/dead-letters/text-body")
	if !strings.Contains(page, `<pre class="json scroll">{&#34;search_id&#34;: 7, &lt;b&gt;</pre>`) {
		t.Errorf("text body: want it shown as stored, HTML-escaped; page:\n%s", page)
	}
	if !strings.Contains(page, `/instances/order/o-1"`) {
		t.Errorf("dead letter of saga order/o-1, which exists: want a link to it")
	}
	_, page = br.get("/dead-letters/placed-o-dead")
	if strings.Contains(page, `/instances/order/o-dead"`) {
		t.Errorf("dead letter of saga order/o-dead, which never existed: want no link to it")
	}
	_, page = br.get("/dead-letters")
	if strings.Contains(page, `/instances/order/o-dead"`) || !strings.Contains(page, `/instances/order/o-1"`) {
		t.Errorf("dead-letter list: want a link to order/o-1 only, not to order/o-dead, which never existed")
	}

	// Chips: every reason and the total, whatever the reason filter.
	_, page = br.get("/dead-letters?reason=unknown_type")
	for _, want := range []string{"all <b>4</b>", "unknown_type <b>3</b>", "store_unavailable <b>1</b>"} {
		if !strings.Contains(page, want) {
			t.Errorf("chips with reason=unknown_type: want %q", want)
		}
	}

	// A replay says it re-queued, and the page then shows it pending or
	// its outcome.
	resp, _ := br.post("/dead-letters/inv-1/replay", url.Values{})
	loc := resp.Header.Get("Location")
	_, page = br.get(strings.TrimPrefix(loc, b.srv.URL))
	if !strings.Contains(page, "re-queued") || strings.Contains(page, "will apply") {
		t.Errorf("after a replay, the flash: want it to say re-queued, not applied")
	}
	eventually(t, "inv-1's page to show it failed again", func() bool {
		_, page = br.get("/dead-letters/inv-1")
		return strings.Contains(page, "failed again at")
	})
}

// A dead letter whose replay succeeded is resolved: counts, bulk actions
// and the overview leave it out, a replay of it is refused without force,
// and the console shows its status instead of the Replay button.
func TestSucceededReplayIsResolved(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	var all, before admin.DeadLetterCounts
	b.getJSON(t, "/api/dead-letters/counts", &before)
	if code, body := b.do(t, http.MethodPost, "/api/dead-letters/placed-o-dead/replay", ""); code != http.StatusAccepted {
		t.Fatalf("replay placed-o-dead: %d %s; want 202", code, body)
	}
	eventually(t, "placed-o-dead's replay to succeed", func() bool {
		d := getDeadLetter(t, b, "placed-o-dead")
		return len(d.Replays) == 1 && d.Replays[0].Outcome == store.ReplaySucceeded
	})
	var after admin.DeadLetterCounts
	b.getJSON(t, "/api/dead-letters/counts", &after)
	b.getJSON(t, "/api/dead-letters/counts?state=all", &all)
	if after.Total != before.Total-1 || all.Total != before.Total {
		t.Errorf("counts: %d unresolved and %d in all after the replay succeeded, want %d and %d", after.Total, all.Total, before.Total-1, before.Total)
	}
	code, body := b.do(t, http.MethodPost, "/api/dead-letters/replay?dry_run=true", "")
	if code != http.StatusOK || !strings.Contains(body, `"matched":`+strconv.Itoa(after.Total)+`,`) {
		t.Errorf("bulk replay dry run: %d %s; want %d matched (not placed-o-dead)", code, body, after.Total)
	}
	var resolved admin.DeadLetterList
	b.getJSON(t, "/api/dead-letters?state=resolved", &resolved)
	if len(resolved.DeadLetters) != 1 || resolved.DeadLetters[0].ID != "placed-o-dead" || resolved.DeadLetters[0].State != store.DeadLettersResolved {
		t.Errorf("state=resolved: %+v, want placed-o-dead, resolved", resolved.DeadLetters)
	}
	code, body = b.do(t, http.MethodPost, "/api/dead-letters/placed-o-dead/replay", "")
	if code != http.StatusConflict || !strings.Contains(body, "force=true") {
		t.Errorf("replay of a resolved dead letter: %d %s; want 409 naming force=true", code, body)
	}
	var ov admin.Overview
	b.getJSON(t, "/api/overview", &ov)
	if ov.Stored.DeadLetters == nil || ov.Stored.DeadLetters.Count != int64(after.Total) {
		t.Errorf("overview: stored dead letters %+v, want %d (the unresolved ones)", ov.Stored.DeadLetters, after.Total)
	}
	br := newBrowser(t, b)
	code, page := br.get("/dead-letters/placed-o-dead")
	if code != http.StatusOK || !strings.Contains(page, "replay succeeded") || strings.Contains(page, `data-action="replay"`) {
		t.Errorf("console page: %d; want the status 'replay succeeded' instead of the Replay button", code)
	}
	if code, body = b.do(t, http.MethodPost, "/api/dead-letters/placed-o-dead/replay?force=true", ""); code != http.StatusAccepted {
		t.Errorf("forced replay: %d %s; want 202", code, body)
	}
}

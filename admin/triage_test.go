package admin_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
)

// declined is a dead letter whose error differs from its siblings' only
// by the order number.
func declined(id string, n int, at time.Time) store.DeadLetter {
	e := idem.Envelope{ID: id, Type: "billing.ChargeCard", Body: []byte(`{}`)}
	return store.DeadLetter{ID: id, Envelope: e, Reason: "handler_failed", Error: fmt.Sprintf("charge order %d: card declined", n),
		Attempts: 3, FirstFailedAt: at, LastFailedAt: at}
}

func seedTriage(t *testing.T, b *bundle) time.Time {
	t.Helper()
	seed(t, b)
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	record(t, b, declined("ch-1", 101, at), declined("ch-2", 202, at.Add(time.Minute)), declined("ch-3", 303, at.Add(2*time.Minute)))
	return at
}

func TestTriageGroupsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	at := seedTriage(t, b)
	var gs admin.DeadLetterGroups
	b.getJSON(t, "/api/dead-letters/groups", &gs)
	if len(gs.Groups) != 3 {
		t.Fatalf("groups: got %+v, want 3 (declined, unknown_type, store_unavailable)", gs.Groups)
	}
	g := gs.Groups[0]
	if g.Count != 3 || g.Reason != "handler_failed" || g.Pattern != "charge order #: card declined" || g.SampleError != "charge order 303: card declined" ||
		!g.FirstSeen.Equal(at) || !g.LastSeen.Equal(at.Add(2*time.Minute)) || g.Fingerprint != store.Fingerprint("handler_failed", "charge order 1: card declined") {
		t.Errorf("largest group: got %+v, want the 3 declined charges, first seen %v, last seen %v", g, at, at.Add(2*time.Minute))
	}
	var list admin.DeadLetterList
	b.getJSON(t, "/api/dead-letters?fingerprint="+g.Fingerprint, &list)
	if len(list.DeadLetters) != 3 || list.DeadLetters[0].Fingerprint != g.Fingerprint {
		t.Errorf("dead letters of the group: got %d, want 3 with its fingerprint", len(list.DeadLetters))
	}
	for _, bad := range []string{"/api/dead-letters/groups?archived=maybe", "/api/dead-letters?archived=%3Cscript%3E", "/api/dead-letters/archive?archived_before=yesterday"} {
		method := http.MethodGet
		if strings.Contains(bad, "/archive") {
			method = http.MethodPost
		}
		if code, body := b.do(t, method, bad, ""); code != http.StatusBadRequest || !strings.Contains(body, "want") {
			t.Errorf("%s %s: %d %s, want 400 naming what is wanted", method, bad, code, body)
		}
	}
}

func TestTriageArchiveRestoreAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seedTriage(t, b)
	code, body := b.do(t, http.MethodPost, "/api/dead-letters/archive?reason=unknown_type&dry_run=true", "")
	if code != http.StatusOK || !strings.Contains(body, `"matched":2`) || !strings.Contains(body, `"done":0`) {
		t.Fatalf("archive dry run: %d %s, want 2 matched, none done", code, body)
	}
	code, body = b.do(t, http.MethodPost, "/api/dead-letters/archive?reason=unknown_type", "")
	if code != http.StatusOK || !strings.Contains(body, `"done":2`) || !strings.Contains(body, "archived") {
		t.Fatalf("archive by filter: %d %s, want 2 archived", code, body)
	}
	var list admin.DeadLetterList
	b.getJSON(t, "/api/dead-letters?reason=unknown_type", &list)
	if len(list.DeadLetters) != 0 {
		t.Errorf("default list after archiving: %d unknown_type dead letters, want 0", len(list.DeadLetters))
	}
	b.getJSON(t, "/api/dead-letters?reason=unknown_type&archived=only", &list)
	if len(list.DeadLetters) != 2 || list.DeadLetters[0].ArchivedAt.IsZero() {
		t.Errorf("archived list: got %+v, want the 2 archived, with archived_at", list.DeadLetters)
	}
	code, body = b.do(t, http.MethodPost, "/api/dead-letters/restore?id=inv-1&id=inv-1&id=missing", "")
	if code != http.StatusOK || !strings.Contains(body, `"done":1`) {
		t.Errorf("restore inv-1 (twice) and a missing ID: %d %s, want 1 done", code, body)
	}
	if d := getDeadLetter(t, b, "inv-1"); !d.ArchivedAt.IsZero() {
		t.Errorf("inv-1 after restore: archived_at %v, want none", d.ArchivedAt)
	}
	code, body = b.do(t, http.MethodPost, "/api/dead-letters/archive?id=ch-1&id=ch-2", "")
	if code != http.StatusOK || !strings.Contains(body, `"done":2`) {
		t.Errorf("archive by ID: %d %s, want 2 done", code, body)
	}
	code, body = b.do(t, http.MethodPost, "/api/dead-letters/restore", "")
	if code != http.StatusOK || !strings.Contains(body, `"done":3`) {
		t.Errorf("restore every archived one: %d %s, want 3 done (inv-2, ch-1, ch-2)", code, body)
	}
}

// A replay records who began it: the API, or the console.
func TestReplayRecordsWho(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seedTriage(t, b)
	if code, body := b.do(t, http.MethodPost, "/api/dead-letters/inv-1/replay", ""); code != http.StatusAccepted {
		t.Fatalf("replay inv-1: %d %s", code, body)
	}
	if rs := getDeadLetter(t, b, "inv-1").Replays; len(rs) != 1 || rs[0].By != "api" {
		t.Errorf("replays of inv-1 after an API replay: %+v, want one by api", rs)
	}
	br := newBrowser(t, b)
	if resp, _ := br.post("/dead-letters/ch-1/replay", url.Values{}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("console replay of ch-1: %d", resp.StatusCode)
	}
	if rs := getDeadLetter(t, b, "ch-1").Replays; len(rs) != 1 || rs[0].By != "console" {
		t.Errorf("replays of ch-1 after a console replay: %+v, want one by console", rs)
	}
	_, page := br.get("/dead-letters/ch-1")
	if !strings.Contains(page, "by console") {
		t.Error("ch-1's page does not say who replayed it")
	}
}

func TestTriageReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, &admin.Config{ReadOnly: true})
	seedTriage(t, b)
	for _, path := range []string{"/api/dead-letters/archive?reason=unknown_type", "/api/dead-letters/restore?id=inv-1"} {
		if code, _ := b.do(t, http.MethodPost, path, ""); code != http.StatusForbidden {
			t.Errorf("POST %s in read-only mode: %d, want 403", path, code)
		}
	}
	br := newBrowser(t, b)
	form := url.Values{"action": {"archive"}, "id": {"inv-1"}, "confirm": {"yes"}}
	if resp, _ := br.post("/dead-letters/selected", form); resp.StatusCode != http.StatusForbidden {
		t.Errorf("console archive of a selection in read-only mode: %d, want 403", resp.StatusCode)
	}
	if d := getDeadLetter(t, b, "inv-1"); !d.ArchivedAt.IsZero() {
		t.Errorf("read-only: inv-1 archived at %v, want not archived", d.ArchivedAt)
	}
	_, page := br.get("/dead-letters")
	if strings.Contains(page, `type="checkbox"`) || strings.Contains(page, "Retry group") {
		t.Error("read-only dead-letters page offers checkboxes or a group retry")
	}
}

func TestConsoleTriage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seedTriage(t, b)
	now := time.Now().UTC()
	hostile := store.DeadLetter{ID: hostileKey, Envelope: idem.Envelope{ID: hostileKey, Type: "x", Body: []byte(`{}`)}, Reason: "handler_failed",
		Error: `<script>alert(1)</script> order 5`, Attempts: 1, FirstFailedAt: now, LastFailedAt: now}
	record(t, b, hostile)
	br := newBrowser(t, b)
	code, page := br.get("/dead-letters")
	fp := store.Fingerprint("handler_failed", "charge order 1: card declined")
	if code != http.StatusOK || !strings.Contains(page, `id="groups"`) || !strings.Contains(page, "charge order #: card declined") ||
		!strings.Contains(page, "?fingerprint="+fp) || !strings.Contains(page, `type="checkbox"`) {
		t.Fatalf("dead-letters page: %d, want the groups with the declined pattern linking to fingerprint %s, and checkboxes", code, fp)
	}
	if strings.Contains(page, "<script>alert(1)") || !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("dead-letters page: the hostile error is not escaped")
	}
	if code, page := br.get("/dead-letters?archived=%3Cscript%3E"); code != http.StatusBadRequest || strings.Contains(page, "<script>") || !strings.Contains(page, "want exclude, only or include") {
		t.Errorf("dead-letters page with a hostile archived filter: %d, want 400 naming the values, the input escaped", code)
	}
	_, page = br.get("/dead-letters?fingerprint=" + fp)
	if n := strings.Count(page, `name="id" value="ch-`); n != 3 || strings.Contains(page, `value="inv-1"`) {
		t.Errorf("list filtered by the group: %d declined rows, want 3 and nothing else", n)
	}

	// A selection is confirmed, naming what it acts on, then archived.
	form := url.Values{"action": {"archive"}, "id": {"ch-1", hostileKey}}
	resp, confirm := br.post("/dead-letters/selected", form)
	if resp.StatusCode != http.StatusOK || !strings.Contains(confirm, "Archive 2 selected") || !strings.Contains(confirm, "&lt;script&gt;") || strings.Contains(confirm, "<script>alert") {
		t.Fatalf("selection before confirming: %d, want a question naming 2 (escaped)", resp.StatusCode)
	}
	if d := getDeadLetter(t, b, "ch-1"); !d.ArchivedAt.IsZero() {
		t.Fatal("ch-1 archived before the confirmation")
	}
	form.Set("confirm", "yes")
	if resp, _ = br.post("/dead-letters/selected", form); resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "done=archived&n=2") {
		t.Fatalf("selection confirmed: %d to %q, want a redirect saying 2 archived", resp.StatusCode, resp.Header.Get("Location"))
	}
	_, page = br.get("/dead-letters?state=all")
	if strings.Contains(page, `value="ch-1"`) {
		t.Error("default list still shows the archived ch-1")
	}
	_, page = br.get("/dead-letters?archived=only")
	if !strings.Contains(page, `value="ch-1"`) || !strings.Contains(page, "Restore all matching") || !strings.Contains(page, "Purge those archived over 7d") {
		t.Error("archived list: want ch-1, a restore and a purge of the old ones")
	}

	// Purge is refused for a dead letter archived just now, and for one
	// not archived.
	bulk := url.Values{"action": {"purge"}, "archived": {"only"}, "confirm": {"yes"}, "archived_before": {now.Format(time.RFC3339Nano)}}
	if resp, _ = br.post("/dead-letters/bulk", bulk); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bulk purge of those archived before now: %d, want 400", resp.StatusCode)
	}
	for _, id := range []string{"ch-1", "ch-2"} {
		if resp, _ = br.post("/dead-letters/"+url.PathEscape(id)+"/purge", url.Values{"confirm": {"yes"}}); resp.StatusCode != http.StatusConflict {
			t.Errorf("purge %s (archived just now, or not archived): %d, want 409", id, resp.StatusCode)
		}
	}
	if d := getDeadLetter(t, b, "ch-1"); d.ID != "ch-1" {
		t.Error("ch-1 was purged")
	}
	// The first, unconfirmed, purge asks with the retention's cutoff.
	delete(bulk, "confirm")
	delete(bulk, "archived_before")
	resp, _ = br.post("/dead-letters/bulk", bulk)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "archived_before=") || !strings.Contains(loc, "confirm=purge") {
		t.Errorf("bulk purge, unconfirmed: %d to %q, want the confirmation with a cutoff", resp.StatusCode, loc)
	}

	// A group retry goes through the counted confirmation.
	retry := url.Values{"action": {"replay"}, "fingerprint": {fp}, "reason": {"handler_failed"}}
	resp, _ = br.post("/dead-letters/bulk", retry)
	loc := resp.Header.Get("Location")
	if !strings.Contains(loc, "fingerprint="+fp) || !strings.Contains(loc, "confirm=replay") {
		t.Fatalf("retry group: redirect to %q, want the confirmation of fingerprint %s", loc, fp)
	}
	_, page = br.get(strings.TrimPrefix(loc, b.srv.URL))
	if !strings.Contains(page, "Replay 2 dead letter") {
		t.Errorf("retry group confirmation: want 2 (ch-2, ch-3: ch-1 is archived)")
	}
}

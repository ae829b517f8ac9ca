package admin_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// unreadableDeadLetters is a store whose GetDeadLetter fails as an
// unreachable database would, while everything else works: it stands for
// the moment a read fails and the delete that follows would not.
type unreadableDeadLetters struct{ store.Store }

func (unreadableDeadLetters) GetDeadLetter(context.Context, string) (*store.DeadLetter, error) {
	return nil, errors.New("connection reset by peer")
}

// TestConsolePurgeOneRefusedWhenTheReadFails: purging one dead letter
// must check that it was archived long enough ago; when the store cannot
// say (any error but store.ErrNotFound), the console must not delete it.
func TestConsolePurgeOneRefusedWhenTheReadFails(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seedTriage(t, b)
	h, err := admin.New(b.e, unreadableDeadLetters{b.st}, &admin.Config{Observer: b.obs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	br := newBrowser(t, &bundle{e: b.e, st: b.st, obs: b.obs, srv: srv})
	resp, _ := br.post("/dead-letters/"+url.PathEscape("ch-1")+"/purge", url.Values{"confirm": {"yes"}})
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("purge ch-1 (not archived) when its read fails: %d, want 503 (the store did not answer)", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.st.GetDeadLetter(ctx, "ch-1"); err != nil {
		t.Errorf("ch-1 after the refused purge: %v, want it kept", err)
	}
}

// TestDeadLettersNextPageKeepsArchivedBefore: the list's next page keeps
// every filter of the page, archived_before included.
func TestDeadLettersNextPageKeepsArchivedBefore(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	at := time.Now().UTC().Add(-30 * 24 * time.Hour).Truncate(time.Second)
	var dls []store.DeadLetter
	ids := make([]string, 0, 60)
	for i := range 60 {
		id := fmt.Sprintf("old-%03d", i)
		dls, ids = append(dls, declined(id, i, at)), append(ids, id)
	}
	record(t, b, dls...)
	ar := b.st.(readmodel.DeadLetterArchiver)
	if _, err := ar.ArchiveDeadLetters(t.Context(), &readmodel.ArchiveParams{IDs: ids, At: at}); err != nil {
		t.Fatal(err)
	}
	before := at.Add(time.Hour).Format(time.RFC3339)
	code, page := newBrowser(t, b).get("/dead-letters?archived=only&archived_before=" + url.QueryEscape(before))
	if code != http.StatusOK {
		t.Fatalf("archived before %s: %d", before, code)
	}
	m := regexp.MustCompile(`href="([^"]*after=[^"]*)">Next page`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("archived before %s, 60 dead letters: no next page link", before)
	}
	if next := html.UnescapeString(m[1]); !strings.Contains(next, "archived_before="+url.QueryEscape(before)) {
		t.Errorf("next page link %q: want archived_before=%s kept", next, before)
	}
}

// TestTriageAPICapsIDs: POST /api/dead-letters/archive and /restore take
// at most as many IDs as the console's selection, and say so.
func TestTriageAPICapsIDs(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seedTriage(t, b)
	q := url.Values{}
	for i := range 501 {
		q.Add("id", fmt.Sprintf("x-%d", i))
	}
	for _, action := range []string{"archive", "restore"} {
		code, body := b.do(t, http.MethodPost, "/api/dead-letters/"+action+"?"+q.Encode(), "")
		if code != http.StatusBadRequest || !strings.Contains(body, "500") {
			t.Errorf("%s 501 IDs: %d %s, want 400 naming the cap of 500", action, code, body)
		}
	}
	q = url.Values{"id": {"ch-1", "ch-2"}}
	if code, body := b.do(t, http.MethodPost, "/api/dead-letters/archive?"+q.Encode(), ""); code != http.StatusOK || !strings.Contains(body, `"done":2`) {
		t.Errorf("archive 2 IDs: %d %s, want 2 archived", code, body)
	}
}

package admin_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
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

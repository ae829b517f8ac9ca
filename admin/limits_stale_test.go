package admin_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// agedStore is a store whose declaration of the limit aged reads as made
// an hour ago: no running engine has declared it since.
type agedStore struct {
	*memstore.Store
	aged string
}

func (s agedStore) DeclaredLimits(ctx context.Context) ([]store.Limit, error) {
	ls, err := s.Store.DeclaredLimits(ctx)
	for i := range ls {
		if ls[i].Name == s.aged {
			ls[i].UpdatedAt = ls[i].UpdatedAt.Add(-time.Hour)
		}
	}
	return ls, err
}

// GET /api/limits and the Limits page mark a declaration no running
// engine refreshed for store.DeclarationStale, and only that one.
func TestLimitsMarkStaleDeclarations(t *testing.T) {
	t.Parallel()
	ms := memstore.New(nil)
	t.Cleanup(func() { _ = ms.Close() })
	st := agedStore{Store: ms, aged: hostileLimit}
	quiet := slog.New(slog.DiscardHandler)
	e, err := idem.NewEngine(st, memtransport.New(nil), &idem.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(e, st, &admin.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	if err := ms.DeclareLimits(context.Background(), []store.Limit{{Name: "parser-api", Concurrency: 2}, {Name: hostileLimit, Concurrency: 1}}); err != nil {
		t.Fatal(err)
	}

	code, body := getPage(t, srv, "/api/limits")
	var list admin.LimitList
	if code != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil || len(list.Limits) != 2 {
		t.Fatalf("GET /api/limits: %d %s, want two limits", code, body)
	}
	for _, l := range list.Limits {
		if want := l.Name == hostileLimit; l.DeclarationStale != want || l.Declared == nil {
			t.Errorf("GET /api/limits: %q declaration_stale %v, declared %+v: want %v and the declaration still shown", l.Name, l.DeclarationStale, l.Declared, want)
		}
	}
	if !strings.Contains(body, `"declaration_stale":true`) || strings.Count(body, "declaration_stale") != 1 {
		t.Errorf("GET /api/limits: %s, want declaration_stale once, on the aged limit", body)
	}

	code, page := getPage(t, srv, "/limits")
	if code != http.StatusOK {
		t.Fatalf("GET /limits: %d", code)
	}
	if n := strings.Count(page, "not declared by a running engine</span> since"); n != 1 {
		t.Errorf("the Limits page marks %d declarations as not declared by a running engine, want 1:\n%s", n, page)
	}
	_, row, _ := strings.Cut(page, `data-limit="&lt;script&gt;`)
	row, _, _ = strings.Cut(row, "</tr>")
	if !strings.Contains(row, "not declared by a running engine") {
		t.Errorf("the aged limit's row lacks the mark:\n%s", row)
	}
}

package admin_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport/memtransport"
)

// BenchmarkLimitsRead measures what one read of the limits costs the
// Limits page, GET /api/limits and /metrics with one limit keyed by
// tenant and 1,000 or 10,000 tenants in flight (the console's store:
// SQLite, or PostgreSQL with IDEM_CONSOLE_STORE=postgres):
//
//	go test -run '^$' -bench BenchmarkLimitsRead -benchtime 20x ./admin/
func BenchmarkLimitsRead(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, kind := range []string{"sqlite", "postgres"} {
			b.Run(fmt.Sprintf("%s/%d", kind, n), func(b *testing.B) { benchLimits(b, kind, n) })
		}
	}
}

func benchLimits(b *testing.B, kind string, n int) {
	quiet := slog.New(slog.DiscardHandler)
	var lim interface {
		store.Store
		store.Limiter
	}
	if kind == "sqlite" {
		st, err := sqlitestore.Open(context.Background(), filepath.Join(b.TempDir(), "idem.db"), &sqlitestore.Config{Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		lim = st
	} else {
		lim = openHistoryPG(b, quiet)
	}
	e, err := idem.NewEngine(lim, memtransport.New(nil), &idem.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	h, err := admin.New(e, lim, &admin.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	l := store.Limit{Name: "parser-api", Concurrency: 2, Rate: 100, Burst: 10}
	if err := lim.DeclareLimits(ctx, []store.Limit{l}); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i += 500 {
		var reqs []store.AdmitRequest
		for j := i; j < i+500 && j < n; j++ {
			reqs = append(reqs, store.AdmitRequest{Holder: fmt.Sprintf("h-%d", j), Keys: []store.LimitKey{{Name: l.Name, Key: fmt.Sprintf("tenant-%06d", j)}}})
		}
		if _, err := lim.Admit(ctx, &store.AdmitParams{Limits: map[string]store.Limit{l.Name: l}, Requests: reqs, TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
	for _, path := range []string{"/limits", "/api/limits", "/metrics"} {
		b.Run(path, func(b *testing.B) {
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+path, nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
				}
			}
		})
	}
}

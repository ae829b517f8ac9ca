package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/idemhq/idem/admin"
)

// limited is an admin handler with a token, and a way to send it requests
// from any client address.
type limited struct {
	t *testing.T
	h *admin.Server
}

func newLimited(t *testing.T) *limited {
	t.Helper()
	b := setup(t, nil)
	h, err := admin.New(b.e, b.st, &admin.Config{Token: "s3cret-token"})
	if err != nil {
		t.Fatal(err)
	}
	return &limited{t: t, h: h}
}

// get sends GET path from addr with the bearer token (none when "").
func (l *limited) get(addr, path, token string) *httptest.ResponseRecorder {
	l.t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = addr + ":40000"
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	l.h.ServeHTTP(w, r)
	return w
}

// Wrong tokens from many addresses exhaust the limits, and are answered
// 429 with Retry-After; the right token is still served, from a fresh
// address and from an exhausted one, on the API and on /metrics (issue 23:
// behind a proxy every client shares one address, and ten wrong tokens
// locked everyone out, Prometheus included).
func TestRightTokenIsNeverLimited(t *testing.T) {
	t.Parallel()
	l := newLimited(t)
	limited := 0
	for a := range 20 {
		for i := range 10 {
			w := l.get(fmt.Sprintf("10.0.0.%d", a), "/api/overview", fmt.Sprintf("guess-%d", i))
			switch w.Code {
			case http.StatusUnauthorized:
			case http.StatusTooManyRequests:
				limited++
				if ra, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || ra < 1 {
					t.Fatalf("429 with Retry-After %q, want a number of seconds", w.Header().Get("Retry-After"))
				}
			default:
				t.Fatalf("wrong token: status %d, want 401 or 429", w.Code)
			}
		}
	}
	if limited == 0 {
		t.Fatal("200 wrong tokens from 20 addresses: none answered 429")
	}
	if w := l.get("10.0.0.0", "/api/overview", "guess-x"); w.Code != http.StatusTooManyRequests {
		t.Errorf("a wrong token from an exhausted address: status %d, want 429", w.Code)
	}
	if w := l.get("10.9.9.9", "/api/overview", "guess-x"); w.Code != http.StatusTooManyRequests {
		t.Errorf("a wrong token from a fresh address with the global limit exhausted: status %d, want 429", w.Code)
	}
	for _, addr := range []string{"10.9.9.9", "10.0.0.0"} {
		for _, path := range []string{"/api/overview", "/metrics"} {
			if w := l.get(addr, path, "s3cret-token"); w.Code != http.StatusOK {
				t.Errorf("GET %s from %s with the right token: status %d %s, want 200", path, addr, w.Code, w.Body)
			}
		}
	}
	if w := l.get("10.9.9.8", "/api/overview", ""); w.Code != http.StatusUnauthorized {
		t.Errorf("no token: status %d, want 401", w.Code)
	}
}

// Once the table of client addresses is full, addresses it does not hold
// share one bucket: they do not each escape the per-client limit.
func TestLimitWithFullClientTable(t *testing.T) {
	t.Parallel()
	l := newLimited(t)
	admin.SetMaxClients(l.h, 4)
	for a := range 4 {
		for i := range 10 {
			if w := l.get(fmt.Sprintf("10.0.0.%d", a), "/api/overview", fmt.Sprintf("guess-%d", i)); w.Code != http.StatusUnauthorized {
				t.Fatalf("failure %d of address %d: status %d, want 401", i, a, w.Code)
			}
		}
	}
	// 40 of the global 100 are spent; new addresses may fail 10 times
	// between them.
	for a := range 20 {
		want := http.StatusUnauthorized
		if a >= 10 {
			want = http.StatusTooManyRequests
		}
		if w := l.get(fmt.Sprintf("10.1.0.%d", a), "/api/overview", "guess"); w.Code != want {
			t.Errorf("wrong token from new address %d with the table full: status %d, want %d", a, w.Code, want)
		}
	}
	if w := l.get("10.1.0.99", "/api/overview", "s3cret-token"); w.Code != http.StatusOK {
		t.Errorf("the right token from a new address with the table full: status %d, want 200", w.Code)
	}
}

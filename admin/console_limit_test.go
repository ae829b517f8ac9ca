package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

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
	h, err := admin.New(b.e, b.st, &admin.Config{Token: "s3cret-token-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	// The buckets refill with time: a stopped clock keeps a slow run
	// (under -race, beside other jobs) from refilling them mid-test.
	now := time.Now()
	admin.SetClock(h, func() time.Time { return now })
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

// Many guessing addresses exhaust the limits: each is then refused
// whatever it sends, the right token too (a 429 must not tell a guesser
// which guess was right), while an address with a clean history still
// gets its token looked at and the right one served.
func TestLimitRefusesGuessersNotOthers(t *testing.T) {
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
	for _, path := range []string{"/api/overview", "/metrics"} {
		if w := l.get("10.0.0.0", path, "s3cret-token-0123456789"); w.Code != http.StatusTooManyRequests {
			t.Errorf("GET %s with the right token from an exhausted address: status %d, want 429", path, w.Code)
		}
		if w := l.get("10.9.9.7", path, "s3cret-token-0123456789"); w.Code != http.StatusOK {
			t.Errorf("GET %s with the right token from a fresh address, the global limit exhausted: status %d %s, want 200", path, w.Code, w.Body)
		}
	}
	// A fresh guesser gets one guess looked at, then the exhausted global
	// limit refuses it.
	if w := l.get("10.9.9.9", "/api/overview", "guess-x"); w.Code != http.StatusUnauthorized {
		t.Errorf("a fresh address's first wrong token: status %d, want 401", w.Code)
	}
	if w := l.get("10.9.9.9", "/api/overview", "s3cret-token-0123456789"); w.Code != http.StatusTooManyRequests {
		t.Errorf("the same address's next try, the global limit exhausted: status %d, want 429", w.Code)
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
	// They share its penalty too, whatever token they send.
	if w := l.get("10.1.0.99", "/api/overview", "s3cret-token-0123456789"); w.Code != http.StatusTooManyRequests {
		t.Errorf("the right token from a new address with the table full and its shared bucket empty: status %d, want 429", w.Code)
	}
	// And an address the table holds stays in its own penalty.
	if w := l.get("10.0.0.0", "/api/overview", "s3cret-token-0123456789"); w.Code != http.StatusTooManyRequests {
		t.Errorf("the right token from an exhausted address: status %d, want 429", w.Code)
	}
}

package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/orders"
)

// chartServer is the *admin.Server behind b, sampling every d.
func chartServer(t *testing.T, b *bundle, d time.Duration) {
	t.Helper()
	s, ok := b.srv.Config.Handler.(*admin.Server)
	if !ok {
		t.Fatalf("the test server's handler is a %T, want *admin.Server", b.srv.Config.Handler)
	}
	admin.SetChartInterval(s, d)
}

// applyOrders publishes n orders and waits until they are applied.
func applyOrders(t *testing.T, b *bundle, prefix string, n int) {
	t.Helper()
	for i := range n {
		k := fmt.Sprintf("%s%03d", prefix, i)
		env, err := b.e.NewEnvelope("placed-"+k, orders.OrderPlaced{OrderID: k, Items: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.e.PublishAndWait(context.Background(), env); err != nil {
			t.Fatalf("apply %s: %v", k, err)
		}
	}
}

func decodeSeries(t *testing.T, body string) admin.Series {
	t.Helper()
	var s admin.Series
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	n := len(s.Time)
	for name, l := range map[string]int{"applied": len(s.Applied), "retried": len(s.Retried), "dead_lettered": len(s.DeadLettered),
		"p50": len(s.LatencyP50), "p99": len(s.LatencyP99)} {
		if l != n {
			t.Fatalf("series %s has %d points, t has %d: want the same length", name, l, n)
		}
	}
	if n > s.Capacity || s.Capacity != 360 {
		t.Fatalf("%d points, capacity %d: want at most 360", n, s.Capacity)
	}
	return s
}

// The series endpoint starts the sampler; applied messages show up as a
// non-zero rate, and their commits as a latency.
func TestOverviewSeries(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	chartServer(t, b, 50*time.Millisecond)
	code, body := b.do(t, http.MethodGet, "/api/overview/series", "")
	if code != http.StatusOK {
		t.Fatalf("GET /api/overview/series: %d %s, want 200", code, body)
	}
	if s := decodeSeries(t, body); s.IntervalSeconds != 0.05 {
		t.Errorf("interval %v s, want 0.05", s.IntervalSeconds)
	}
	applyOrders(t, b, "chart-", 5)
	var s admin.Series
	eventually(t, "a point with applied messages", func() bool {
		_, body := b.do(t, http.MethodGet, "/api/overview/series", "")
		s = decodeSeries(t, body)
		for i, a := range s.Applied {
			if a > 0 && s.LatencyP50[i] != nil && *s.LatencyP50[i] > 0 {
				return true
			}
		}
		return false
	})
	for i := 1; i < len(s.Time); i++ {
		if s.Time[i] <= s.Time[i-1] {
			t.Fatalf("times %v: want them increasing, oldest first", s.Time)
		}
	}
}

// /api/overview/series needs the bearer token like every /api/ route; the
// console reads the same JSON at /overview/series with its session.
func TestOverviewSeriesAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, &admin.Config{Token: "s3cret-token-0123456789"})
	if code, _ := b.do(t, http.MethodGet, "/api/overview/series", ""); code != http.StatusUnauthorized {
		t.Errorf("API without the token: %d, want 401", code)
	}
	if code, body := b.do(t, http.MethodGet, "/api/overview/series", "", "Authorization", "Bearer s3cret-token-0123456789"); code != http.StatusOK {
		t.Errorf("API with the token: %d %s, want 200", code, body)
	} else {
		decodeSeries(t, body)
	}
	br := newBrowser(t, b)
	if code, _ := br.get("/overview/series"); code != http.StatusSeeOther {
		t.Errorf("console series without a session: %d, want 303 to the login form", code)
	}
	if resp, _ := br.post("/login", url.Values{"token": {"s3cret-token-0123456789"}, "next": {"/"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d, want 303", resp.StatusCode)
	}
	code, body := br.get("/overview/series")
	if code != http.StatusOK {
		t.Fatalf("console series with a session: %d %s, want 200", code, body)
	}
	decodeSeries(t, body)
	if code, _ := br.get("/api/overview/series"); code != http.StatusUnauthorized {
		t.Errorf("API with only the session cookie: %d, want 401 (the session is for the console only)", code)
	}
}

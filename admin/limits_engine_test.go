package admin_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store/sqlitestore"
)

// limitRig is an engine on SQLite that declares parser-api (2 at once
// per tenant) over files.Parse, whose handler holds each message until
// open is called, and an admin server over it.
type limitRig struct {
	*bundle
	open func()
}

func newLimitRig(t *testing.T, consumers int) *limitRig {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e, err := idem.NewEngine(st, st, &idem.Config{Logger: quiet, BatchSize: 1, Lanes: 4, Consumers: consumers, LimitsInterval: 20 * time.Millisecond,
		Limits: []idem.Limit{{Name: "parser-api", MessageTypes: []string{"files.Parse"}, Concurrency: 2,
			Key: func(env *idem.Envelope) string { return env.Headers["tenant"] }}}})
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	if err := e.Handle("files.Parse", func(ctx context.Context, _ idem.Envelope) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { open(); _ = e.Stop(context.Background()) })
	h, err := admin.New(e, st, &admin.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &limitRig{bundle: &bundle{e: e, srv: srv}, open: open}
}

// publish sends n files.Parse messages of tenant acme.
func (r *limitRig) publish(t *testing.T, n int) {
	t.Helper()
	var envs []idem.Envelope
	for i := range n {
		envs = append(envs, idem.Envelope{ID: fmt.Sprintf("p-%d", i), Type: "files.Parse", CorrelationID: fmt.Sprintf("file-%d", i), Headers: map[string]string{"tenant": "acme"}})
	}
	if err := r.e.Publish(context.Background(), envs...); err != nil {
		t.Fatal(err)
	}
}

// inFlight is a condition: GET /api/limits shows parser-api declared,
// with want messages in flight.
func (r *limitRig) inFlight(t *testing.T, want int) func() bool {
	return func() bool {
		var list admin.LimitList
		r.getJSON(t, "/api/limits", &list)
		return len(list.Limits) == 1 && list.Limits[0].InFlight == want && list.Limits[0].Declared != nil
	}
}

// With an engine that declares a limit: GET /api/limits shows the
// declaration, the messages it admitted (held by a handler that waits)
// up to the cap, and every slot released once they are handled.
func TestAPILimitsFromEngine(t *testing.T) {
	t.Parallel()
	r := newLimitRig(t, 0)
	r.publish(t, 3)
	eventually(t, "two of acme's calls in flight, its cap", r.inFlight(t, 2))
	var list admin.LimitList
	r.getJSON(t, "/api/limits", &list)
	if l := list.Limits[0]; l.Name != "parser-api" || valuesOf(l.Declared) != `{"concurrency":2,"rate":0,"burst":0}` || len(l.Counters) != 1 || l.Counters[0].Key != "acme" {
		t.Fatalf("the engine's limit: %+v, want parser-api declared with a cap of 2, acme's counter", l)
	}
	eventually(t, "the third call waiting for admission", func() bool {
		var list admin.LimitList
		r.getJSON(t, "/api/limits", &list)
		return len(list.Limits) == 1 && list.Limits[0].Waiting == 1 && len(list.Limits[0].Counters) == 1 && list.Limits[0].Counters[0].Waiting == 1
	})
	if code, body := r.do(t, http.MethodGet, "/metrics", ""); code != http.StatusOK || !strings.Contains(body, "idem_limit_waiting{key=\"acme\",limit=\"parser-api\"} 1\n") {
		t.Errorf("/metrics: %d, want idem_limit_waiting of acme 1 in:\n%s", code, body)
	}
	if code, body := r.do(t, http.MethodGet, "/limits", ""); code != http.StatusOK || !strings.Contains(body, `<td class="waiting">1</td>`) || !strings.Contains(body, "1 waiting") {
		t.Errorf("the Limits page: %d, want the limit's and acme's 1 waiting in:\n%s", code, body)
	}
	r.open()
	eventually(t, "every slot released", r.inFlight(t, 0))
	var after admin.LimitList
	r.getJSON(t, "/api/limits", &after)
	if l := after.Limits[0]; l.Waiting != 0 {
		t.Errorf("once every call was handled: %+v, want none waiting", l)
	}
}

// A cap raised through the API while a consumer waits for admission
// admits the waiting message within the engine's LimitsInterval: the
// waiting receive ends when the limits in force change
// (store.ReceiveParams.Changed), and the next decides under the new ones.
func TestAPILimitRaiseReachesWaitingConsumer(t *testing.T) {
	t.Parallel()
	r := newLimitRig(t, 2)
	r.publish(t, 3)
	eventually(t, "two of acme's calls in flight, its cap", r.inFlight(t, 2))
	if code, body := r.do(t, http.MethodPost, "/api/limits/parser-api", `{"concurrency": 3}`); code != http.StatusOK {
		t.Fatalf("raise the cap: %d %s", code, body)
	}
	eventually(t, "the third call admitted under the raised cap", r.inFlight(t, 3))
}

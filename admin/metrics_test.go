package admin_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// countingTransport is a memory transport that counts its messages, like a
// broker with transport.PendingCounter.
type countingTransport struct {
	*memtransport.Transport
	fail bool
}

func (c *countingTransport) Pending(context.Context) (int, int, error) {
	if c.fail {
		return 0, 0, errors.New("broker unreachable")
	}
	return c.Transport.Pending(context.Background())
}

var _ transport.PendingCounter = (*countingTransport)(nil)

// The per-type metrics count what the engine did to each saga type:
// duplicates, dead letters by reason, keys that were not canonical, and
// the transition latency; the queue depth comes from the transport and the
// row counts from the store (memstore's are exact).
func TestMetricsByType(t *testing.T) {
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := memstore.New(nil)
	defer st.Close()
	tr := &countingTransport{Transport: memtransport.New(nil)}
	defer tr.Close()
	obs := admin.NewObserver()
	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: logger, Observe: obs.Observe})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(orders.OrderMachine()); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.Stop(ctx)

	placed := func(id, order string) idem.Envelope {
		env, err := e.NewEnvelope(id, orders.OrderPlaced{OrderID: order, Items: 1})
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	envs := []idem.Envelope{
		placed("p-1", "caf\u00e9"),  // canonical (NFC)
		placed("p-2", "cafe\u0301"), // NFD: the same saga, a key that was not canonical
		placed("p-1", "caf\u00e9"),  // a duplicate
		{ID: "u-1", Type: "nobody.Consumes", Body: []byte(`{}`)},
	}
	for _, env := range envs {
		if err := e.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "four settled messages", func() bool {
		s := e.Stats()
		return s.Applied+s.Ignored+s.Duplicates+s.DeadLettered == 4
	})

	reg := prometheus.NewRegistry()
	h, err := admin.New(e, st, &admin.Config{Observer: obs, Logger: logger, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`idem_saga_messages_total{result="applied",saga_type="order"} 1`,
		`idem_saga_messages_total{result="ignored",saga_type="order"} 1`,
		`idem_saga_messages_total{result="duplicate",saga_type="order"} 1`,
		`idem_saga_dead_letters_total{reason="` + idem.ReasonUnknownType + `",saga_type="none"} 1`,
		`idem_saga_noncanonical_keys_total{saga_type="order"} 0`,
		`idem_saga_conflicts_total{saga_type="order"} 0`,
		`idem_transition_seconds_count{saga_type="order"}`,
		`idem_queue_ready 0`, `idem_queue_up 1`,
		`idem_store_rows{table="inbox"} 2`, `idem_store_rows{table="journal"} 1`, `idem_store_rows{table="dead_letters"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics: want a line with %q in:\n%s", want, body)
		}
	}

	// The NFD key above met a saga in a state that ignores it; a saga
	// started by an NFD key counts one key that was not canonical.
	if err := e.Publish(ctx, placed("p-3", "na\u0303o")); err != nil {
		t.Fatal(err)
	}
	poll(t, "a non-canonical key", func() bool { return e.TypeStats()["order"].NonCanonicalKeys == 1 })
	tr.fail = true
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil))
	body = rec.Body.String()
	for _, want := range []string{`idem_saga_noncanonical_keys_total{saga_type="order"} 1`, `idem_queue_up 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics: want a line with %q in:\n%s", want, body)
		}
	}
}

// poll waits until cond holds, failing t after ten seconds.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

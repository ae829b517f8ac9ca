package admin_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/store"
)

// longJournal is the length of the journal BenchmarkInstancePageLongJournal
// renders the instance page of.
const longJournal = 10_000

// BenchmarkInstancePageLongJournal renders the instance page of a saga
// whose journal holds 10,000 entries, each with a payload, headers and a
// diff, on PostgreSQL (a schema of its own, dropped at the end): the page
// shows the latest 200.
//
//	IDEM_TEST_PG_URL=postgres://... go test -run '^$' -bench InstancePageLongJournal -benchtime 20x ./admin/
func BenchmarkInstancePageLongJournal(b *testing.B) {
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := openHistoryPG(b, logger)
	e, err := idem.NewEngine(st, st, &idem.Config{Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Register(orders.OrderMachine()); err != nil {
		b.Fatal(err)
	}
	h, err := admin.New(e, st, &admin.Config{Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	in := &store.Instance{SagaType: "order", Key: "long", State: "AwaitingPayment", Data: []byte(`{"ID":"long"}`), SchemaVersion: 1, Version: 1, CreatedAt: now, UpdatedAt: now}
	for c := range longJournal / 1000 {
		ch := &store.Changes{}
		if c == 0 {
			ch.Inserts = []*store.Instance{in}
		}
		for i := c * 1000; i < (c+1)*1000; i++ {
			ch.Journal = append(ch.Journal, store.JournalEntry{SagaType: "order", Key: "long", MessageID: fmt.Sprintf("m-%05d", i), EventType: "orders.ItemAdded",
				FromState: "AwaitingPayment", ToState: "AwaitingPayment", Version: 1, At: now.Add(time.Duration(i-longJournal) * time.Second),
				JournalDetail: store.JournalDetail{
					Payload: []byte(fmt.Sprintf(`{"OrderID":"long","Item":%d,"Note":"%s"}`, i, strings.Repeat("n", 200))),
					Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, CausationID: fmt.Sprintf("m-%05d", i-1),
					Diff: []byte(fmt.Sprintf(`[{"op":"replace","path":"/Items","value":%d}]`, i)), Duration: time.Millisecond,
				}})
		}
		u, err := st.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		err = u.Commit(ctx, ch)
		_ = u.Rollback(ctx)
		if err != nil {
			b.Fatal(err)
		}
	}
	if _, err := st.Pool().Exec(ctx, `ANALYZE idem_journal`); err != nil {
		b.Fatal(err)
	}
	get := func() {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/instances/order/long", nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "m-09999") {
			b.Fatalf("instance page: %d, or without the latest entry", rec.Code)
		}
	}
	get() // warm the connection and the plan cache
	b.ResetTimer()
	for range b.N {
		get()
	}
}

package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// An engine served over HTTP: the Observer is created first so that the
// engine reports every unit of work to the latency histogram.
func Example() {
	obs := admin.NewObserver()
	st := memstore.New(nil)
	e, err := idem.NewEngine(st, memtransport.New(nil), &idem.Config{Observe: obs.Observe})
	if err != nil {
		panic(err)
	}
	if err := e.Register(orders.OrderMachine()); err != nil {
		panic(err)
	}
	srv, err := admin.New(e, st, &admin.Config{Observer: obs})
	if err != nil {
		panic(err)
	}
	// In a program: e.Start(ctx), then http.Server{Addr: "127.0.0.1:8080", Handler: srv}.

	submit := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "http://127.0.0.1/api/messages",
		strings.NewReader(`{"id": "m-1", "type": "orders.OrderPlaced", "body": {"OrderID": "o-1", "Items": 2}}`))
	submit.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, submit)
	fmt.Print(rec.Code, " ", rec.Body.String())

	bad := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "http://127.0.0.1/api/messages", strings.NewReader(`{"type": "orders.OrderPlaced"}`))
	bad.Header.Set("Content-Type", "application/json")
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, bad)
	fmt.Print(rec.Code, " ", rec.Body.String())
	// Output:
	// 202 {"id":"m-1","dedup_id":"m-1","type":"orders.OrderPlaced","saga":"order","key":"o-1"}
	// 400 {"error":"message has no id and body: id, type and body are required, like {\"id\": \"order-1-placed\", \"type\": \"orders.OrderPlaced\", \"body\": {\"OrderID\": \"order-1\", \"Items\": 2}}"}
}

// The console and the API mounted under /idem/ in an application's own
// mux, read-only: every mutating control is hidden and refused.
func Example_mount() {
	st := memstore.New(nil)
	e, err := idem.NewEngine(st, memtransport.New(nil), nil)
	if err != nil {
		panic(err)
	}
	if err := e.Register(orders.OrderMachine()); err != nil {
		panic(err)
	}
	srv, err := admin.New(e, st, &admin.Config{ReadOnly: true})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/idem/", http.StripPrefix("/idem", srv))
	// In a program: http.ListenAndServe("127.0.0.1:8080", mux).

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodGet, "http://127.0.0.1/idem/sagas", nil))
	body := rec.Body.String()
	fmt.Println(rec.Code, strings.Contains(body, `href="/idem/instances"`), strings.Contains(body, "read-only"))

	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodPost, "http://127.0.0.1/idem/api/dead-letters/replay", nil))
	fmt.Println(rec.Code)
	// Output:
	// 200 true true
	// 403
}

package admin_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/ingestor/ingest"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/store/pgstore"
)

// The console at scale: 1,000,000 saga instances, 100,000 dead letters,
// 50,000 timers and 300,000 journal rows in one PostgreSQL schema, and
// every console page rendered through the real handler. The schema is
// seeded once (server-side, a few tens of seconds) and reused by later
// runs: drop it with DROP SCHEMA bench_console_v1 CASCADE to reseed.
//
//	IDEM_TEST_PG_URL=postgres://... go test -run '^$' -bench BenchmarkConsolePages -benchtime 20x ./admin/
const (
	scaleSchema      = "bench_console_v1"
	scaleInstances   = 1_000_000
	scaleDeadLetters = 100_000
	scaleTimers      = 50_000
)

// scaleSeedSQL fills an empty schema. Instances: half orders (keys
// cust-<n>/order-<g>, grouped by customer for the prefix filter), 30%
// import chunks and 20% import jobs (hex keys); about two thirds finished.
// Every tenth instance (orders whose key ends in 0) has a journal of
// three rows.
var scaleSeedSQL = []string{
	fmt.Sprintf(`
INSERT INTO idem_instances (saga_type, key, state, data, schema_version, version, timers, created_at, updated_at, finished_at)
SELECT typ, key, state,
       jsonb_build_object('ID', key, 'Items', g %% 7, 'Customer', 'cust-' || (g %% 5000), 'Note', repeat('x', 40 + g %% 80)),
       1, 1 + g %% 5, NULL, created, created + make_interval(secs => g %% 3600),
       CASE WHEN final THEN created + make_interval(secs => g %% 3600) END
FROM (
  SELECT g, typ, key, states[1 + (g / 10) %% array_length(states, 1)] AS state,
         (states[1 + (g / 10) %% array_length(states, 1)]) = ANY(finals) AS final,
         now() - make_interval(secs => g * 3) AS created
  FROM (
    SELECT g,
      CASE WHEN g %% 10 < 5 THEN 'order' WHEN g %% 10 < 8 THEN 'ingestor.chunk' ELSE 'ingestor.job' END AS typ,
      CASE WHEN g %% 10 < 5 THEN 'cust-' || (g %% 5000) || '/order-' || g
           WHEN g %% 10 < 8 THEN md5('job' || (g / 10)) || ':' || (g %% 10 - 5)
           ELSE md5('job' || g) END AS key,
      CASE WHEN g %% 10 < 5 THEN ARRAY['AwaitingPayment','Shipped','Shipped','Cancelled']
           WHEN g %% 10 < 8 THEN ARRAY['Imported','Imported','Imported','Failed']
           ELSE ARRAY['Succeeded','Succeeded','PartiallySucceeded','Processing','Queued','Failed','Rejected'] END AS states,
      CASE WHEN g %% 10 < 5 THEN ARRAY['Shipped','Cancelled']
           WHEN g %% 10 < 8 THEN ARRAY['Imported']
           ELSE ARRAY['Succeeded','Rejected'] END AS finals
    FROM generate_series(1, %d) g
  ) a
) b`, scaleInstances),
	`
INSERT INTO idem_journal (saga_type, key, raw_key, message_id, event_type, from_state, to_state, version, at)
SELECT i.saga_type, i.key, i.key, 'msg-' || md5(i.key || s), 'event.' || s, CASE WHEN s = 1 THEN '' ELSE 'S' || (s - 1) END, 'S' || s, s, i.created_at + make_interval(secs => s)
FROM idem_instances i, generate_series(1, 3) s
WHERE i.saga_type = 'order' AND i.key LIKE '%0'`,
	fmt.Sprintf(`
INSERT INTO idem_dead_letters (id, envelope, body, reason, error, saga_type, key, attempts, first_failed_at, last_failed_at)
SELECT 'msg-' || md5('dl' || g),
       json_build_object('id', 'msg-' || md5('dl' || g), 'type', typ, 'correlation_id', 'cust-' || (g %% 5000) || '/order-' || (g * 10), 'sent_at', now() - make_interval(secs => g)),
       convert_to(json_build_object('OrderID', 'cust-' || (g %% 5000) || '/order-' || (g * 10), 'Items', g %% 7)::text, 'UTF8'),
       reason, 'the handler said no: ' || reason || ' (attempt ' || (g %% 5) || ')',
       CASE WHEN reason = 'unknown_type' THEN '' ELSE 'order' END,
       CASE WHEN reason = 'unknown_type' THEN '' ELSE 'cust-' || (g %% 5000) || '/order-' || (g * 10) END,
       1 + g %% 5, now() - make_interval(secs => g * 7), now() - make_interval(secs => g * 7 - 30)
FROM (SELECT g,
        (ARRAY['retries_exhausted','retries_exhausted','retries_exhausted','permanent_error','permanent_error','malformed_body','unknown_type','unhandled_event','saga_not_found','oversized_body'])[1 + g %% 10] AS reason,
        (ARRAY['orders.OrderPlaced','orders.PaymentReceived','orders.Shipped'])[1 + g %% 3] AS typ
      FROM generate_series(1, %d) g) d`, scaleDeadLetters),
	fmt.Sprintf(`
INSERT INTO idem_timers (saga_type, key, name, due_at, envelope, body)
SELECT 'order', 'cust-' || (g %% 5000) || '/order-' || g, 'payment-timeout', now() + make_interval(secs => g - 1000),
       jsonb_build_object('id', 'timer-' || g, 'type', 'orders.PaymentTimedOut'), convert_to('{"OrderID":"x"}', 'UTF8')
FROM generate_series(1, %d * 10, 10) g`, scaleTimers),
	`ANALYZE`,
}

// openScaleStore opens (and seeds, the first time) the benchmark schema.
func openScaleStore(b *testing.B) *pgstore.Store {
	url := os.Getenv("IDEM_TEST_PG_URL")
	if url == "" {
		b.Skip("IDEM_TEST_PG_URL is not set: the console scale benchmark needs PostgreSQL")
	}
	ctx := context.Background()
	st, err := pgstore.Open(ctx, url, &pgstore.Config{Schema: scaleSchema, Migrate: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	conn, err := st.Pool().Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM idem_dead_letters`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	if n == scaleDeadLetters {
		return st
	}
	if n != 0 {
		b.Fatalf("schema %s holds %d dead letters, neither 0 nor %d: drop it (DROP SCHEMA %s CASCADE) and run again", scaleSchema, n, scaleDeadLetters, scaleSchema)
	}
	start := time.Now()
	for _, q := range scaleSeedSQL {
		if _, err := conn.Exec(ctx, q); err != nil {
			b.Fatalf("seed %s: %v", scaleSchema, err)
		}
	}
	b.Logf("seeded %s in %s", scaleSchema, time.Since(start).Round(time.Second))
	return st
}

// BenchmarkConsolePages renders each console page once per op.
func BenchmarkConsolePages(b *testing.B) {
	st := openScaleStore(b)
	e, err := idem.NewEngine(st, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range []idem.Machine{orders.OrderMachine(), ingest.JobMachine(), ingest.ChunkMachine(nil)} {
		if err := e.Register(m); err != nil {
			b.Fatal(err)
		}
	}
	srv, err := admin.New(e, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	deep := deepCursor(b, st)
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"saga_types", "/sagas"},
		{"instances", "/instances"},
		{"instances_deep", "/instances?after=" + deep},
		{"instances_by_type_state", "/instances?type=ingestor.job&state=PartiallySucceeded"},
		{"instances_by_prefix", "/instances?type=order&prefix=" + url.QueryEscape("cust-4242/")},
		{"instances_stuck", "/instances?stuck=true"},
		{"instance", "/instances/order/" + url.PathEscape("cust-10/order-10")},
		{"dead_letters", "/dead-letters"},
		{"dead_letters_by_reason", "/dead-letters?reason=malformed_body"},
		{"dead_letters_by_message_type", "/dead-letters?message_type=orders.Shipped"},
		{"dead_letters_by_key", "/dead-letters?type=order&key=" + url.QueryEscape("cust-70/order-700")},
		{"dead_letter", "/dead-letters/msg-" + md5hex(b, st, "dl70")},
		{"timers", "/timers"},
		{"timers_overdue", "/timers?overdue=true"},
		{"instances_deep_previous", "/instances?before=" + deep},
		{"instances_updated_between", "/instances?type=order&from=" + url.QueryEscape(time.Now().Add(-24*time.Hour).UTC().Format(time.RFC3339)) + "&to=" + url.QueryEscape(time.Now().Add(-23*time.Hour).UTC().Format(time.RFC3339))},
		{"dead_letters_archived", "/dead-letters?archived=only"},
		{"dead_letters_by_fingerprint", "/dead-letters?fingerprint=none"},
		{"schedules", "/schedules"},
		{"replicas", "/replicas"},
		{"deploys", "/deploys"},
		{"instance_ended_saga_actions", "/instances/order/" + url.PathEscape("cust-10/order-10") + "?confirm=end&reason=r&version=1"},
		{"timers_due_between", "/timers?from=" + url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339)) + "&to=" + url.QueryEscape(time.Now().Add(2*time.Hour).UTC().Format(time.RFC3339))},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			get(b, srv, p.path) // warm the connection and the plan cache
			b.ResetTimer()
			for range b.N {
				get(b, srv, p.path)
			}
		})
	}
}

func get(b *testing.B, h http.Handler, path string) {
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+path, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body.String())
	}
	if !strings.Contains(rec.Body.String(), "</html>") {
		b.Fatalf("GET %s: not a whole page", path)
	}
}

// deepCursor is the console's cursor after the 900,000th instance in key
// order: a page near the end of the listing.
func deepCursor(b *testing.B, st *pgstore.Store) string {
	var typ, key string
	err := st.Pool().QueryRow(context.Background(), `SELECT saga_type, key FROM idem_instances
ORDER BY saga_type COLLATE "C", key COLLATE "C" OFFSET 900000 LIMIT 1`).Scan(&typ, &key)
	if err != nil {
		b.Fatal(err)
	}
	j, _ := json.Marshal(map[string]string{"t": typ, "k": key})
	return base64.RawURLEncoding.EncodeToString(j)
}

func md5hex(b *testing.B, st *pgstore.Store, s string) string {
	var h string
	if err := st.Pool().QueryRow(context.Background(), `SELECT md5($1)`, s).Scan(&h); err != nil {
		b.Fatal(err)
	}
	return h
}

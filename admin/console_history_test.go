package admin_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// The ticket saga emits a message on each step and changes its state, so
// that a history entry has a payload, emitted messages and a diff.
type (
	ticket struct {
		Title  string `json:"title"`
		Note   string `json:"note"`
		Status string `json:"status"`
	}
	ticketOpened struct{ ID, Title, Note string }
	ticketClosed struct{ ID string }
	ticketNotify struct{ ID, What string }
)

func ticketMachine() *saga.Machine[ticket] {
	m := saga.New[ticket]("ticket")
	open, closed := m.State("Open"), m.Final("Closed")
	opened := saga.NewEvent[ticketOpened](m, func(e ticketOpened) string { return e.ID })
	closing := saga.NewEvent[ticketClosed](m, func(e ticketClosed) string { return e.ID })
	m.Initially(saga.When(opened).Then(func(c *saga.Context[ticket], e ticketOpened) error {
		*c.Data = ticket{Title: e.Title, Note: e.Note, Status: "open"}
		c.Send(ticketNotify{ID: e.ID, What: "opened"})
		return nil
	}).TransitionTo(open))
	m.During(open, saga.When(closing).Then(func(c *saga.Context[ticket], e ticketClosed) error {
		c.Data.Status = "closed"
		c.Send(ticketNotify{ID: e.ID, What: "closed"})
		return nil
	}).TransitionTo(closed))
	return m
}

type historyBundle struct {
	e   *idem.Engine
	st  store.Store
	srv *httptest.Server
}

// setupHistory serves an engine with the ticket saga on backend: "sqlite"
// and "postgres" (the store is the queue) or "memory" (memstore with the
// outbox and memtransport), journaling with Config.JournalPayloadLimit
// limit.
func setupHistory(t testing.TB, backend string, limit int) *historyBundle {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var st store.Store
	var tr transport.Transport
	switch backend {
	case "sqlite":
		s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		st, tr = s, s
	case "postgres":
		s := openHistoryPG(t, logger)
		st, tr = s, s
	case "memory":
		st, tr = memstore.New(nil), memtransport.New(nil)
	}
	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: logger, JournalPayloadLimit: limit, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(ticketMachine()); err != nil {
		t.Fatal(err)
	}
	if err := e.Handle(saga.MessageType(ticketNotify{}), func(context.Context, idem.Envelope) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(e, st, &admin.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Stop(sctx); err != nil {
			t.Errorf("stop engine: %v", err)
		}
		_ = st.Close()
	})
	return &historyBundle{e: e, st: st, srv: srv}
}

// openHistoryPG opens a pgstore in a schema of its own, dropped at the end.
func openHistoryPG(t testing.TB, logger *slog.Logger) *pgstore.Store {
	t.Helper()
	url := testenv.PostgresURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "t_history_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	s, err := pgstore.Open(ctx, url, &pgstore.Config{Schema: schema, Migrate: true, Logger: logger})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return s
}

// applyTicket publishes msg as id and waits until the engine applied it.
func applyTicket(t *testing.T, b *historyBundle, id string, msg any) {
	t.Helper()
	env, err := b.e.NewEnvelope(id, msg)
	if err != nil {
		t.Fatal(err)
	}
	env.Headers = map[string]string{"x-tenant": "acme"}
	if _, err := b.e.PublishAndWait(context.Background(), env); err != nil {
		t.Fatalf("apply %s: %v", id, err)
	}
}

// getHistory GETs path and decodes a history, requiring 200.
func getHistory(t *testing.T, b *historyBundle, path string) (admin.SagaHistory, http.Header) {
	t.Helper()
	resp, err := b.srv.Client().Get(b.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d, body %s; want 200", path, resp.StatusCode, body)
	}
	var h admin.SagaHistory
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatalf("GET %s: decode %s: %v", path, body, err)
	}
	return h, resp.Header
}

// A step's history entry has its payload, headers, causation and
// correlation IDs, emitted messages with their sent state, the state diff
// and a duration, on the API and in the console's download.
func TestHistoryOfAStep(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres", "memory"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			b := setupHistory(t, backend, 0)
			applyTicket(t, b, "open-t1", ticketOpened{ID: "t1", Title: "printer", Note: "<script>alert(1)</script>"})
			applyTicket(t, b, "close-t1", ticketClosed{ID: "t1"})
			h, _ := getHistory(t, b, "/api/sagas/ticket/t1/history")
			if len(h.Entries) != 2 {
				t.Fatalf("history of ticket/t1: got %d entries, want 2: %+v", len(h.Entries), h)
			}
			open, closed := h.Entries[0], h.Entries[1]
			if open.PayloadEncoding != "json" || !strings.Contains(string(open.Payload), `"Note":"\u003cscript\u003ealert(1)\u003c/script\u003e"`) && !strings.Contains(string(open.Payload), `<script>`) {
				t.Errorf("payload of the first entry: got %s (%s), want the TicketOpened JSON", open.Payload, open.PayloadEncoding)
			}
			if open.Headers["x-tenant"] != "acme" || open.CorrelationID != "t1" {
				t.Errorf("first entry: headers %v, correlation %q; want x-tenant=acme and t1", open.Headers, open.CorrelationID)
			}
			if closed.CausationID != "" && closed.CausationID == open.MessageID {
				t.Errorf("second entry's causation is the first message %q: the close was published by the test", closed.CausationID)
			}
			if string(closed.Diff) != `[{"op":"replace","path":"/status","value":"closed"}]` {
				t.Errorf("diff of the close: got %s, want the status replaced by closed", closed.Diff)
			}
			if !strings.Contains(string(open.Diff), `"path":"/title","value":"printer"`) {
				t.Errorf("diff of the open: got %s, want the title added", open.Diff)
			}
			if len(closed.Emitted) != 1 || closed.Emitted[0].Type != saga.MessageType(ticketNotify{}) || closed.Emitted[0].ID == "" {
				t.Fatalf("emitted by the close: got %+v, want one %s with its ID", closed.Emitted, saga.MessageType(ticketNotify{}))
			}
			// The notification is a delivered message: handled by now on every backend.
			if s := closed.Emitted[0].Sent; s != "sent" {
				t.Errorf("sent state of %s: got %q, want sent", closed.Emitted[0].ID, s)
			}
			download, hdr := getHistory(t, b, "/instances/ticket/t1/history.json")
			if !strings.HasPrefix(hdr.Get("Content-Disposition"), "attachment") || len(download.Entries) != 2 || string(download.Entries[1].Diff) != string(closed.Diff) {
				t.Errorf("console download: Content-Disposition %q, %d entries; want an attachment with the API's 2 entries", hdr.Get("Content-Disposition"), len(download.Entries))
			}
			if cd := hdr.Get("Content-Disposition"); cd != `attachment; filename="history-ticket-t1.json"` {
				t.Errorf("console download: Content-Disposition %q, want the file named after the saga's type and key", cd)
			}
		})
	}
}

// The payload cap cuts payloads and states and marks them (a cut state
// has no diff); a negative cap records no payload, headers, state or diff,
// but still the IDs and emitted messages.
func TestHistoryPayloadLimit(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300)
	cut := setupHistory(t, "memory", 64)
	applyTicket(t, cut, "open-t2", ticketOpened{ID: "t2", Title: "long", Note: long})
	h, _ := getHistory(t, cut, "/api/sagas/ticket/t2/history")
	var text string
	_ = json.Unmarshal(h.Entries[0].Payload, &text)
	if e := h.Entries[0]; !e.PayloadTruncated || e.PayloadEncoding != "utf-8" || len(text) == 0 || len(text) > 64 {
		t.Errorf("limit 64: payload %s (%s, truncated %v), want at most 64 bytes of text, marked truncated", e.Payload, e.PayloadEncoding, e.PayloadTruncated)
	}
	if e := h.Entries[0]; !e.StateTruncated || e.Diff != nil {
		t.Errorf("limit 64: diff %s (state truncated %v), want no diff and the state marked truncated", e.Diff, e.StateTruncated)
	}
	off := setupHistory(t, "memory", -1)
	applyTicket(t, off, "open-t3", ticketOpened{ID: "t3", Title: "off"})
	h, _ = getHistory(t, off, "/api/sagas/ticket/t3/history")
	if e := h.Entries[0]; e.Payload != nil || e.Headers != nil || e.Diff != nil || len(e.Emitted) != 1 || e.CorrelationID != "t3" {
		t.Errorf("capture off: got %+v, want no payload, headers or diff, and the emitted message and correlation ID kept", e)
	}
}

func TestHistoryPayloadLimitValidated(t *testing.T) {
	t.Parallel()
	st := memstore.New(nil)
	_, err := idem.NewEngine(st, memtransport.New(nil), &idem.Config{JournalPayloadLimit: 1 << 30})
	if err == nil || !strings.Contains(err.Error(), "Config.JournalPayloadLimit") {
		t.Errorf("NewEngine with JournalPayloadLimit 1 GiB: got %v, want an error naming Config.JournalPayloadLimit", err)
	}
}

// The instance page shows each entry's detail, escaped: hostile payloads
// (JSON, text, bytes that are not UTF-8), headers and actors are text, not
// markup.
func TestHistoryOnTheInstancePage(t *testing.T) {
	t.Parallel()
	b := setupHistory(t, "sqlite", 0)
	applyTicket(t, b, "open-t4", ticketOpened{ID: "t4", Title: "printer", Note: "<b>bold</b>"})
	ctx := context.Background()
	now := time.Now().UTC()
	hostile := func(id string, payload string) store.JournalEntry {
		return store.JournalEntry{SagaType: "ticket", Key: "t4", MessageID: id, EventType: "ops.Note", FromState: "Open", ToState: "Open", Version: 1, At: now,
			JournalDetail: store.JournalDetail{Payload: []byte(payload), Headers: map[string]string{"x-<i>": "<script>alert(2)</script>"},
				Diff: []byte(`[{"op":"add","path":"/<script>","value":"<script>alert(3)</script>"}]`), Actor: "<script>alert(4)</script>"}}
	}
	uow, err := b.st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = uow.Commit(ctx, &store.Changes{Journal: []store.JournalEntry{hostile("h-text", "<script>alert(1)</script>"), hostile("h-bytes", "\xff<script>alert(5)</script>\x00")}})
	_ = uow.Rollback(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.srv.Client().Get(b.srv.URL + "/instances/ticket/t4")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	html := string(page)
	for _, want := range []string{`<details class="entry-detail">`, "&lt;b&gt;bold&lt;/b&gt;", "x-tenant", `/instances/ticket/t4/history.json`, ">add<", "/title",
		"&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;script&gt;alert(2)", "&lt;script&gt;alert(4)", `\xff&lt;script&gt;alert(5)&lt;/script&gt;\x00`} {
		if !strings.Contains(html, want) {
			t.Errorf("instance page lacks %q", want)
		}
	}
	if strings.Contains(html, "<script>alert") || strings.Contains(html, "<b>bold") || strings.Contains(html, "<i>") {
		t.Errorf("instance page holds hostile markup unescaped:\n%s", html)
	}
}

// The instance page renders the latest journal entries only, and says how
// many earlier ones the download holds.
func TestInstancePageJournalBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	now := time.Now().UTC()
	var js []store.JournalEntry
	for i := range 205 {
		js = append(js, store.JournalEntry{SagaType: "order", Key: "o-1", MessageID: fmt.Sprintf("bulk-%03d", i), EventType: "bulk.Event",
			FromState: "AwaitingPayment", ToState: "AwaitingPayment", Version: 1, At: now})
	}
	commitChanges(t, b.st, &store.Changes{Journal: js})
	code, page := newBrowser(t, b).get("/instances/order/o-1")
	if code != http.StatusOK {
		t.Fatalf("instance page: %d", code)
	}
	// 206 entries (the order's first, then 205): the latest 200 are
	// bulk-005 to bulk-204.
	if n := strings.Count(page, "message bulk-"); n != 200 {
		t.Errorf("the page shows %d of the 205 bulk entries; want the latest 200", n)
	}
	if !strings.Contains(page, "message bulk-005 ") || strings.Contains(page, "message bulk-004 ") || !strings.Contains(page, "6 earlier entries") {
		t.Errorf("the page does not show the latest 200 entries with a note on the 6 earlier ones")
	}
}

package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport/memtransport"
)

// Hostile saga types, states, fingerprints and replica IDs (markup, NUL,
// invalid UTF-8) are text on the Deploys page and in GET /api/deploys.
func TestConsoleDeploysHostileStrings(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// PostgreSQL refuses NUL and invalid UTF-8 in text: there the
	// markup alone is hostile.
	kept := func(s string) string {
		if os.Getenv(consoleStoreEnv) == "postgres" {
			return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "")
		}
		return s
	}
	var (
		typ   = kept("<script>alert(\"type\")</script>\x00\xff")
		state = kept("<script>alert(\"state\")</script>\x00\xfe")
		fp    = kept("<script>alert(\"fp\")</script>\x00")
		id    = kept("<img src=x onerror=alert(\"replica\")>\x00\xff")
		other = kept("<script>alert(\"t\")</script>\x00")
	)
	ctx := context.Background()
	now := time.Now()
	commitChanges(t, b.st, &store.Changes{Inserts: []*store.Instance{{SagaType: typ, Key: "k-1", State: state, Data: []byte(`{}`), SchemaVersion: 1,
		Version: 1, CreatedAt: now, UpdatedAt: now}}})
	ds := any(b.st).(store.DefinitionStore)
	if err := ds.RecordDefinitions(ctx, now, []store.Definition{{SagaType: other, Fingerprint: fp, Description: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := b.st.Heartbeat(ctx, &store.Replica{ID: id, StartedAt: now, BeatAt: now, Interval: time.Hour,
		Definitions: map[string]string{other: fp, kept("other\xff"): kept(fp + "\xff")}}); err != nil {
		t.Fatal(err)
	}
	code, page := b.do(t, http.MethodGet, "/deploys", "")
	if code != http.StatusOK {
		t.Fatalf("GET /deploys: %d %s", code, page)
	}
	for _, bad := range []string{"<script>alert", "<img src", "\x00"} {
		if strings.Contains(page, bad) {
			t.Errorf("the Deploys page holds %q unescaped", bad)
		}
	}
	for _, want := range []string{"&lt;script&gt;alert(&#34;state&#34;)", "&lt;script&gt;alert(&#34;type&#34;)", "&lt;script&gt;alert(&#34;fp&#34;)",
		"&lt;img src=x onerror=alert(&#34;replica&#34;)&gt;", `saga-type-removed <b>1</b>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the Deploys page lacks %q", want)
		}
	}
	var d admin.Deploys
	b.getJSON(t, "/api/deploys", &d)
	x := deployType(t, &d, strings.ToValidUTF8(typ, "\uFFFD"))
	if len(x.States) != 1 || x.States[0].State != strings.ToValidUTF8(state, "\uFFFD") || x.States[0].Live != 1 || len(x.States[0].Hazards) != 1 {
		t.Errorf("hostile type in the API: %+v; want its state with 1 live saga and the saga-type-removed hazard", x)
	}
}

// A store that cannot count its live sagas (memstore) shows the
// definitions and the replicas, and says why there is no count and no
// check; an engine without machines says there is no check; a store that
// keeps neither census nor definitions says there is nothing to show, and
// the API answers 501.
func TestConsoleDeploysDegrades(t *testing.T) {
	t.Parallel()
	mem := memstore.New(nil)
	srv := deployServer(t, mem, true)
	code, page := getPage(t, srv, "/deploys")
	for _, want := range []string{"registers no saga machine", "cannot count its live sagas", "this console"} {
		if code != http.StatusOK || !strings.Contains(page, want) {
			t.Errorf("memstore without machines: %d, page lacks %q", code, want)
		}
	}
	if strings.Contains(page, `id="deploy-check"`) {
		t.Error("memstore without machines: the page shows a check")
	}
	code, body := getPage(t, srv, "/api/deploys")
	var d admin.Deploys
	if err := json.Unmarshal([]byte(body), &d); code != http.StatusOK || err != nil || d.Check != nil || d.Census != nil || !d.Registry || len(d.Machines) != 0 {
		t.Errorf("memstore: %d %s; want 200, no check, no census, a registry and no machines", code, body)
	}

	sq, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sq.Close() })
	now := time.Now()
	commitChanges(t, sq, &store.Changes{Inserts: []*store.Instance{{SagaType: "order", Key: "o-1", State: "Packing", Data: []byte(`{}`), SchemaVersion: 1,
		Version: 1, CreatedAt: now, UpdatedAt: now}}})
	code, page = getPage(t, deployServer(t, sq, true), "/deploys")
	if code != http.StatusOK || !strings.Contains(page, "registers no saga machine") || !strings.Contains(page, `data-state="Packing"`) ||
		strings.Contains(page, `id="deploy-check"`) || strings.Contains(page, "cannot count") {
		t.Errorf("SQLite without machines: %d; want the live sagas by state, no check, and why:\n%s", code, page)
	}

	bare := deployServer(t, bareStore{memstore.New(nil)}, false)
	if code, page := getPage(t, bare, "/deploys"); code != http.StatusOK || !strings.Contains(page, `id="deploys-problem"`) || !strings.Contains(page, "neither counts its live sagas nor keeps the definitions") {
		t.Errorf("a bare store: %d, want the page to say there is nothing to show:\n%s", code, page)
	}
	if code, body := getPage(t, bare, "/api/deploys"); code != http.StatusNotImplemented || !strings.Contains(body, "neither counts") {
		t.Errorf("a bare store's API: %d %s, want 501 saying why", code, body)
	}
}

// bareStore is a store with none of the optional capabilities.
type bareStore struct{ store.Store }

// deployServer serves an engine over st with a plain handler and no
// machine, started when start is set.
func deployServer(t *testing.T, st store.Store, start bool) *httptest.Server {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tr := memtransport.New(nil)
	t.Cleanup(func() { tr.Close() })
	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Handle("billing.Invoice", func(context.Context, idem.Envelope) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if start {
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Stop(context.Background()) })
	}
	h, err := admin.New(e, st, &admin.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// getPage returns the status and body of GET path.
func getPage(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

const hostileHost = `<script>alert("host")</script>`

// beatReplicas stores a gone replica with a hostile host and a stopped one
// beside the bundle's own engine, and waits for the engine's first beat.
func beatReplicas(t *testing.T, b *bundle) {
	t.Helper()
	// Gone, and not replaced: its last beat (now, after the engine's first
	// beat and so after its start), with a 10 ms interval, makes it gone a
	// moment later.
	eventually(t, "the engine's first heartbeat", func() bool {
		rs, err := b.st.Replicas(t.Context(), 10)
		return err == nil && len(rs) == 1
	})
	now := time.Now().UTC()
	gone := &store.Replica{ID: "r-gone", Host: hostileHost, Version: "v0.9.0 <b>bold</b>", StartedAt: now.Add(-2 * time.Hour),
		Config: map[string]string{"sagas": "<img src=x onerror=alert(1)>"}, Lanes: 4, Consumers: 2, Interval: 10 * time.Millisecond, BeatAt: now}
	stopped := &store.Replica{ID: "r-stopped", Host: "db-2", Version: "v1.0.0", StartedAt: now.Add(-3 * time.Hour), Lanes: 2, Consumers: 1,
		Interval: 10 * time.Second, BeatAt: now.Add(-time.Minute), StoppedAt: now.Add(-time.Minute)}
	for _, r := range []*store.Replica{gone, stopped} {
		if err := b.st.Heartbeat(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "r-gone to be gone", func() bool { return gone.State(time.Now()) == store.ReplicaGone })
}

// GET /api/replicas lists every replica with its state, counts them by
// state and marks the replica serving the API.
func TestAPIReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	beatReplicas(t, b)
	br := newBrowser(t, b)
	code, body := br.get("/api/replicas")
	if code != http.StatusOK {
		t.Fatalf("GET /api/replicas: status %d, want 200: %s", code, body)
	}
	var got admin.ReplicaList
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("GET /api/replicas: %v: %s", err, body)
	}
	if got.Counts != (admin.ReplicaCounts{Alive: 1, Stopped: 1, Gone: 1}) {
		t.Errorf("counts: got %+v, want one alive, one stopped, one gone", got.Counts)
	}
	states := map[string]string{}
	for _, r := range got.Replicas {
		states[r.ID] = r.State
		if r.Self != (r.ID == b.e.ReplicaID()) {
			t.Errorf("replica %s: self %v, want it set on the console's engine %s only", r.ID, r.Self, b.e.ReplicaID())
		}
	}
	want := map[string]string{b.e.ReplicaID(): "alive", "r-gone": "gone", "r-stopped": "stopped"}
	for id, s := range want {
		if states[id] != s {
			t.Errorf("replica %s: state %q, want %q (all: %v)", id, states[id], s, states)
		}
	}
	if len(got.Replicas) != 3 || got.Replicas[0].ID != b.e.ReplicaID() {
		t.Errorf("order: got %v, want the latest started (the engine) first", states)
	}
	if code, body := br.get("/api/replicas?limit=0"); code != http.StatusBadRequest || !strings.Contains(body, "limit") {
		t.Errorf("GET /api/replicas?limit=0: %d %s, want 400 naming the limit", code, body)
	}
}

// The replicas page shows each replica with its state, and hostile strings
// as text.
func TestConsoleReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	beatReplicas(t, b)
	code, page := newBrowser(t, b).get("/replicas")
	if code != http.StatusOK || !strings.Contains(page, `href="/replicas" aria-current="page"`) {
		t.Fatalf("GET /replicas: status %d, want 200 and the Replicas nav link current:\n%s", code, page)
	}
	for _, bad := range []string{hostileHost, "<b>bold</b>", "<img src=x"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page holds %q unescaped", bad)
		}
	}
	for id, state := range map[string]string{b.e.ReplicaID(): "alive", "r-gone": "gone", "r-stopped": "stopped"} {
		if !strings.Contains(page, `data-replica="`+id+`" data-state="`+state+`"`) {
			t.Errorf("no row of replica %s in state %s", id, state)
		}
	}
	if !strings.Contains(page, "&lt;script&gt;alert(&#34;host&#34;)&lt;/script&gt;") || !strings.Contains(page, "this console") {
		t.Errorf("the page lacks the escaped hostile host or the mark of this console's replica:\n%s", page)
	}
}

// hiddenReplicas is a store without store.ReplicaRegistry.
type hiddenReplicas struct{ store.Store }

// On a store without heartbeats, the API answers 501 and the page says so.
func TestReplicasWithoutRegistry(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	h, err := admin.New(b.e, hiddenReplicas{memstore.New(nil)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/api/replicas", nil))
	if rec.Code != http.StatusNotImplemented || !strings.Contains(rec.Body.String(), "heartbeats") {
		t.Errorf("GET /api/replicas: %d %s, want 501 saying the store keeps no heartbeats", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/replicas", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "keeps no replica heartbeats") {
		t.Errorf("GET /replicas: %d, want 200 saying the store keeps no heartbeats:\n%s", rec.Code, rec.Body)
	}
}

// /metrics counts the replicas by state, read from the store at scrape.
func TestMetricsReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	beatReplicas(t, b)
	code, body := newBrowser(t, b).get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	for _, want := range []string{`idem_replicas{state="alive"} 1`, `idem_replicas{state="gone"} 1`, `idem_replicas{state="stopped"} 1`} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

package admin_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
)

// A gone replica that a replica started since has replaced is "replaced",
// not gone (idem_replicas{state="gone"} no longer counts it); the records
// of replicas no longer running can be removed, asked first in the
// console (CSRF-protected as every console POST) and through the API,
// never a live one.
func TestReplicasReplacedAndRemoved(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	now := time.Now().UTC()
	// Its last beat is less than an hour old: the engine's heartbeat prunes
	// a replaced record an hour after its last beat.
	old := &store.Replica{ID: "r-crashed", Host: "h", StartedAt: now.Add(-time.Hour), Interval: 10 * time.Second, BeatAt: now.Add(-30 * time.Minute)}
	if err := b.st.Heartbeat(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the engine's heartbeat", func() bool { rs, err := b.st.Replicas(t.Context(), 10); return err == nil && len(rs) == 2 })
	var list admin.ReplicaList
	b.getJSON(t, "/api/replicas", &list)
	if list.Counts.Gone != 0 || list.Counts.Replaced != 1 || list.Counts.Alive != 1 {
		t.Errorf("counts with a crashed replica and a live one started since: %+v, want 1 alive, 1 replaced, 0 gone", list.Counts)
	}
	if _, metrics := b.do(t, http.MethodGet, "/metrics", ""); !strings.Contains(metrics, `idem_replicas{state="gone"} 0`) || !strings.Contains(metrics, `idem_replicas{state="replaced"} 1`) {
		t.Errorf("metrics: want gone 0 and replaced 1:\n%s", grepLines(metrics, "idem_replicas"))
	}
	br := newBrowser(t, b)
	resp, _ := br.post("/replicas/remove", url.Values{})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/replicas?confirm=remove" {
		t.Fatalf("remove without confirm: %d to %q, want the question", resp.StatusCode, loc)
	}
	if rs, _ := b.st.Replicas(t.Context(), 10); len(rs) != 2 {
		t.Fatalf("asked, not confirmed: %d replicas, want 2", len(rs))
	}
	if _, page := br.get("/replicas?confirm=remove"); !strings.Contains(page, `id="confirm-remove"`) {
		t.Fatal("no question on the replicas page")
	}
	resp, _ = br.post("/replicas/remove", url.Values{"confirm": {"yes"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirmed remove: %d", resp.StatusCode)
	}
	if _, page := br.get(resp.Header.Get("Location")); !strings.Contains(page, "1 replica record(s) removed.") {
		t.Errorf("after removal the page does not say so")
	}
	rs, err := b.st.Replicas(t.Context(), 10)
	if err != nil || len(rs) != 1 || rs[0].ID != b.e.ReplicaID() {
		t.Errorf("after removal: %+v, %v; want only the live engine", rs, err)
	}
	code, body := b.do(t, http.MethodPost, "/api/replicas/remove", "")
	var out admin.RemovedReplicas
	if code != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil || out.Removed != 0 {
		t.Errorf("POST /api/replicas/remove with only a live replica: %d %s, want 200 and none removed", code, body)
	}
}

// With no engine alive at all the overview warns.
func TestOverviewWarnsWithNoEngine(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	br := newBrowser(t, b)
	eventually(t, "the engine's heartbeat", func() bool { rs, err := b.st.Replicas(t.Context(), 10); return err == nil && len(rs) == 1 })
	if _, page := br.get("/"); strings.Contains(page, `id="no-engine"`) {
		t.Error("the overview warns of no engine while one is alive")
	}
	if err := b.e.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, page := br.get("/"); !strings.Contains(page, `id="no-engine"`) {
		t.Error("with its only engine stopped, the overview does not warn that no engine is alive")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

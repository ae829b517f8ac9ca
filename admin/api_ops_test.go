package admin_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemhq/idem/admin"
)

func TestAPIConsoleRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)

	var list admin.SagaList
	b.getJSON(t, "/api/sagas?type=order&prefix=o-&status=active&limit=2", &list)
	if len(list.Sagas) != 2 || list.Sagas[0].Key != "o-1" || list.Next == "" {
		t.Fatalf("first page of prefix o-: %+v, want o-1, o-2 and a cursor", list)
	}
	var page2 admin.SagaList
	b.getJSON(t, "/api/sagas?type=order&prefix=o-&status=active&limit=2&after="+url.QueryEscape(list.Next), &page2)
	if len(page2.Sagas) != 1 || page2.Sagas[0].Key != "o-3" {
		t.Errorf("second page of prefix o-: %+v, want o-3 alone", page2)
	}
	if code, _ := b.do(t, http.MethodGet, "/api/sagas?status=sleeping", ""); code != http.StatusBadRequest {
		t.Errorf("status=sleeping: %d, want 400", code)
	}

	var types []admin.SagaType
	b.getJSON(t, "/api/saga-types", &types)
	if len(types) != 1 || types[0].Active != 5 || len(types[0].Edges) == 0 || types[0].States[0].Count != 5 {
		t.Errorf("saga types: %+v, want order with 5 active in AwaitingPayment", types)
	}
	var o admin.Overview
	b.getJSON(t, "/api/overview", &o)
	if o.Totals.Applied < 5 || len(o.Sagas) != 1 || o.Sagas[0].Active != 5 {
		t.Errorf("overview: %+v", o)
	}

	var counts admin.DeadLetterCounts
	b.getJSON(t, "/api/dead-letters/counts", &counts)
	if counts.Total != 3 || counts.ByReason[0].Reason != "unknown_type" || counts.ByReason[0].Count != 2 {
		t.Errorf("dead-letter counts: %+v, want 3 with unknown_type 2 first", counts)
	}
	code, body := b.do(t, http.MethodPost, "/api/dead-letters/purge?reason=unknown_type&dry_run=true", "")
	if code != http.StatusOK || !strings.Contains(body, `"matched":2`) || !strings.Contains(body, `"done":0`) {
		t.Errorf("purge dry run: %d %s, want 2 matched and none purged", code, body)
	}
	code, body = b.do(t, http.MethodPost, "/api/dead-letters/purge?reason=unknown_type", "")
	if code != http.StatusOK || !strings.Contains(body, `"done":2`) {
		t.Errorf("purge: %d %s, want 2 purged", code, body)
	}
	b.getJSON(t, "/api/dead-letters/counts", &counts)
	if counts.Total != 1 {
		t.Errorf("after purge: %d dead letters, want 1", counts.Total)
	}

	var timers admin.TimerList
	b.getJSON(t, "/api/timers?type=order&key=o-3", &timers)
	if len(timers.Timers) != 1 || timers.Timers[0].Name != "overdue" || timers.Timers[0].Overdue {
		t.Fatalf("timers of o-3: %+v", timers)
	}
	code, body = b.do(t, http.MethodPost, "/api/timers/order/o-3/overdue/reschedule", `{"in": "2h"}`)
	if code != http.StatusOK || !strings.Contains(body, `"name":"overdue"`) {
		t.Errorf("reschedule: %d %s", code, body)
	}
	if code, _ := b.do(t, http.MethodDelete, "/api/timers/order/o-3/overdue", ""); code != http.StatusOK {
		t.Errorf("cancel: %d, want 200", code)
	}
	if code, _ := b.do(t, http.MethodDelete, "/api/timers/order/o-3/overdue", ""); code != http.StatusNotFound {
		t.Errorf("cancel again: %d, want 404", code)
	}
	if n := timerCount(t, b, "o-3"); n != 0 {
		t.Errorf("after cancel: %d timers of o-3, want 0", n)
	}
}

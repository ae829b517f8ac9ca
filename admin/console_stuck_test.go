package admin_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

// The stuck view filters by its reasons, each most urgent first, shows
// how many each reason holds (past deadline first), and filters by idle
// time; an unknown reason or idle time is a 400.
func TestConsoleStuckViewFilters(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	stuckFixture(t, b)
	br := newBrowser(t, b)
	keys := func(page string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`<td class="keycell"><a href="/instances/order/([^"]+)"`).FindAllStringSubmatch(page, -1) {
			out = append(out, m[1])
		}
		return out
	}
	for reason, want := range map[string]string{"deadline": "o-3", "retrying": "o-1", "timer": "x-9 o-2"} {
		code, page := br.get("/instances?stuck=on&type=order&reason=" + reason)
		if got := strings.Join(keys(page), " "); code != http.StatusOK || got != want {
			t.Errorf("stuck view, reason %s: %d, sagas %q, want %q (most overdue first)", reason, code, got, want)
		}
	}
	_, page := br.get("/instances?stuck=on&type=order")
	chips := regexp.MustCompile(`data-reason="(\w+)"[^>]*>[^<]*<b>(\d+)`).FindAllStringSubmatch(page, -1)
	var got []string
	for _, c := range chips {
		got = append(got, c[1]+"="+c[2])
	}
	if strings.Join(got, " ") != "deadline=1 retrying=1 timer=2" {
		t.Errorf("stuck view chips: %q, want past deadline first: deadline=1 retrying=1 timer=2", got)
	}
	if code, page := br.get("/instances?stuck=on&type=order&idle=1000h"); code != http.StatusOK || len(keys(page)) != 0 {
		t.Errorf("stuck view idle 1000h: %d, sagas %q, want none", code, keys(page))
	}
	if _, page := br.get("/instances?stuck=on&type=order&idle=1ns"); len(keys(page)) < 4 {
		t.Errorf("stuck view idle 1ns: sagas %q, want every active one", keys(page))
	}
	for _, bad := range []string{"reason=nosuch", "idle=soon", "idle=-1h"} {
		if code, _ := br.get("/instances?stuck=on&" + bad); code != http.StatusBadRequest {
			t.Errorf("stuck view %s: %d, want 400", bad, code)
		}
	}
}

// stuckFixture seeds b's sagas and stops its engine, then makes o-1
// retrying, o-2 and x-9 (most overdue) have an overdue timer, and o-3 a
// request past its deadline.
func stuckFixture(t *testing.T, b *bundle) {
	t.Helper()
	seed(t, b)
	ctx := t.Context()
	if err := b.e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	recordRetry(t, b, "pay-o-1", "o-1")
	now := time.Now().UTC()
	timer := func(key, name string, ago time.Duration) store.Timer {
		return store.Timer{SagaType: "order", Key: key, Name: name, DueAt: now.Add(-ago),
			Envelope: idem.Envelope{ID: "timer-" + key + name, Type: "idem.Timeout@order", Body: []byte(`{}`)}}
	}
	uow, err := b.st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &store.Changes{Timers: []store.Timer{timer("o-2", "reminder", time.Minute), timer("x-9", "reminder", time.Hour),
		timer("o-3", saga.RequestTimerPrefix+"authorize", 90*time.Second)}}); err != nil {
		t.Fatal(err)
	}
}

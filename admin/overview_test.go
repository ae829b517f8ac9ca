package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// The overview shows what the store holds, whoever stored it: 16 dead
// letters and 3 timers written before this process started (as after
// `idem demo --serve`), while this process's own rates and totals are 0.
func TestOverviewShowsStoredCounts(t *testing.T) {
	b := setup(t, nil)
	ctx := t.Context()
	at := time.Now().UTC().Add(-time.Hour)
	c := &store.Changes{}
	for i := range 16 {
		id := fmt.Sprintf("dl-%02d", i)
		c.DeadLetters = append(c.DeadLetters, store.DeadLetter{ID: id, Envelope: transport.Envelope{ID: id, Type: "x.Unknown", Body: []byte(`{}`)},
			Reason: "unknown_type", Error: "no saga", Attempts: 1, FirstFailedAt: at, LastFailedAt: at})
	}
	for i := range 3 {
		c.Timers = append(c.Timers, store.Timer{SagaType: "order", Key: fmt.Sprintf("o-%d", i), Name: "expire", DueAt: at.Add(48 * time.Hour),
			Envelope: transport.Envelope{ID: fmt.Sprintf("t-%d", i), Type: "orders.Expired", Body: []byte(`{}`)}})
	}
	uow, err := b.st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}

	br := newBrowser(t, b)
	code, body := br.get("/api/overview")
	if code != http.StatusOK {
		t.Fatalf("GET /api/overview: %d %s", code, body)
	}
	var o admin.Overview
	if err := json.Unmarshal([]byte(body), &o); err != nil {
		t.Fatal(err)
	}
	if o.Totals.DeadLettered != 0 {
		t.Fatalf("this process dead-lettered %d messages, want 0 (the dead letters were stored before)", o.Totals.DeadLettered)
	}
	for what, c := range map[string]struct {
		got  *admin.StoredCount
		want int64
	}{"dead letters": {o.Stored.DeadLetters, 16}, "timers": {o.Stored.Timers, 3}} {
		if c.got == nil || c.got.Count != c.want || c.got.Accuracy != admin.AccuracyExact {
			t.Errorf("GET /api/overview: stored %s %+v, want %d, exact", what, c.got, c.want)
		}
	}

	code, page := br.get("/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d", code)
	}
	for what, re := range map[string]*regexp.Regexp{
		"dead letters": regexp.MustCompile(`id="stored-dead-letters"[^>]*>16<`),
		"timers":       regexp.MustCompile(`id="stored-timers"[^>]*>3<`),
	} {
		if !re.MatchString(page) {
			t.Errorf("the overview page does not show the stored %s (%s) in:\n%s", what, re, page)
		}
	}
}

package admin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// /metrics exports each limit's cap in force and each counter's use, at
// most 100 keys a limit: the rest, and a key named "other", are summed
// under key="other".
func TestMetricsLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ms := memstore.New(nil)
	ctx := context.Background()
	seedLimits(t, ms)
	wide := store.Limit{Name: "wide", Concurrency: 5}
	if err := ms.DeclareLimits(ctx, []store.Limit{wide}); err != nil {
		t.Fatal(err)
	}
	if err := ms.SetLimit(ctx, store.Limit{Name: "parser-api", Concurrency: 4, Rate: 20, Burst: 5}); err != nil {
		t.Fatal(err)
	}
	var reqs []store.AdmitRequest
	for i := range 150 {
		reqs = append(reqs, store.AdmitRequest{Holder: fmt.Sprintf("w-%d", i), Keys: []store.LimitKey{{Name: "wide", Key: fmt.Sprintf("k-%03d", i)}}})
	}
	for i := range 2 {
		reqs = append(reqs, store.AdmitRequest{Holder: fmt.Sprintf("o-%d", i), Keys: []store.LimitKey{{Name: "wide", Key: "other"}}})
	}
	if _, err := ms.Admit(ctx, &store.AdmitParams{Limits: map[string]store.Limit{"wide": wide}, TTL: time.Hour, Requests: reqs}); err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(b.e, ms, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := scrape(t, h)
	wantLines(t, body,
		"idem_limit_concurrency{limit=\"parser-api\"} 4\n", // the override
		"idem_limit_concurrency{limit=\"wide\"} 5\n",
		`idem_limit_concurrency{limit="<script>alert(\"limit\")</script>"} 1`+"\n",
		"idem_limit_in_flight{key=\"tenant-a\",limit=\"parser-api\"} 2\n",
		`idem_limit_in_flight{key="<img src=x onerror=alert(\"key\")>",limit="parser-api"} 1`+"\n",
		"idem_limit_tokens{key=\"tenant-a\",limit=\"parser-api\"} ",
		"idem_limit_in_flight{key=\"k-000\",limit=\"wide\"} 1\n",
		"idem_limit_in_flight{key=\"other\",limit=\"wide\"} 52\n",       // 50 keys and the key named other
		"idem_limit_waiting{key=\"tenant-a\",limit=\"parser-api\"} 0\n", // memstore records no refusal
		"idem_store_up 1\n",
	)
	if n := strings.Count(body, `idem_limit_in_flight{key="k-`); n != 100 {
		t.Errorf("/metrics has %d wide counters of their own, want 100", n)
	}
	if n := strings.Count(body, `key="other",limit="wide"`); n != 3 {
		t.Errorf("/metrics has %d series of wide's key other, want one in flight, one tokens and one waiting", n)
	}
	if strings.Contains(body, "idem_limit_concurrency{limit=\"parser-api\"} 2\n") {
		t.Errorf("/metrics shows parser-api's declared cap, not its override")
	}
}

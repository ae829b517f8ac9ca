package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
)

// recordRetry stores a retry of an OrderPlaced for the order key, as the
// engine records one after a failed delivery, with a next attempt an hour
// away, and returns its ID.
func (r *apiRig) recordRetry(t *testing.T, key string) string {
	t.Helper()
	env, err := r.e.NewEnvelope("retry-"+key, orders.OrderPlaced{OrderID: key, Items: 1})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rt := &store.Retry{ID: env.DedupID(), SagaType: "order", Key: key, MessageID: env.ID, MessageType: env.Type, Attempts: 2,
		Error: "payment gateway said no <script>\nsecond line", FirstFailedAt: now, LastFailedAt: now, NextAttemptAt: now.Add(time.Hour), Envelope: &env}
	if err := r.st.(store.RetryRecorder).RecordRetry(context.Background(), rt); err != nil {
		t.Fatal(err)
	}
	return rt.ID
}

// waitNoRetry waits until the order key has no retry state left.
func (r *apiRig) waitNoRetry(t *testing.T, key string) {
	t.Helper()
	enginetest.Eventually(t, func() string {
		rs, err := r.st.(store.RetryRecorder).Retries(context.Background(), store.Key{SagaType: "order", Key: key})
		if err != nil {
			return err.Error()
		}
		if len(rs) > 0 {
			return "order " + key + " still has a retry row"
		}
		return ""
	})
}

var digestLine = regexp.MustCompile(`digest (\S+)`)

// idem retries ls lists a retrying message from the store; retry-now
// publishes it again through the API, and the saga moves on long before
// its next attempt; retry by filter acts on exactly the set it counted.
func checkRetries(t *testing.T, r *apiRig) {
	id := r.recordRetry(t, "r-1")
	code, out, errOut := run(t, append([]string{"retries", "ls"}, r.storeArgs...)...)
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, `"r-1"`) || !strings.Contains(out, id) || !strings.Contains(out, "payment gateway said no") || strings.Contains(out, "second line") {
		t.Errorf("retries ls printed %q; want r-1, its ID and the first line of its error", out)
	}
	code, out, errOut = run(t, "retries", "retry-now", "order", "r-1", id, "--api", r.url)
	wantExit(t, code, out, errOut, 0)
	r.waitState(t, "r-1", "AwaitingPayment")
	r.waitNoRetry(t, "r-1")
	if code, _, errOut := run(t, "retries", "retry-now", "order", "r-1", id, "--api", r.url); code != 2 || !strings.Contains(errOut, "404") {
		t.Errorf("retry-now of a message no longer retrying: exit %d, stderr %q; want 2 and the API's 404", code, errOut)
	}

	r.recordRetry(t, "r-2")
	r.recordRetry(t, "r-3")
	count := func() string {
		t.Helper()
		code, out, errOut := run(t, "retries", "retry", "--saga-type", "order", "--dry-run", "--api", r.url)
		wantExit(t, code, out, errOut, 0)
		m := digestLine.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("retries retry --dry-run printed %q; want a digest", out)
		}
		if want := "to retry exactly these: idem retries retry --api " + r.url + " --saga-type order --yes --digest " + m[1]; !strings.Contains(out, want) {
			t.Errorf("retries retry --dry-run printed %q; want %q", out, want)
		}
		return m[1]
	}
	stale := count()
	r.recordRetry(t, "r-4") // joins the set after the count
	code, _, errOut = run(t, "retries", "retry", "--saga-type", "order", "--yes", "--digest", stale, "--api", r.url)
	if code != 2 || !strings.Contains(errOut, "409") {
		t.Errorf("retry on a stale digest: exit %d, stderr %q; want 2 and the API's 409", code, errOut)
	}
	if got := r.state(t, "r-2"); got != "" {
		t.Errorf("a refused batch published r-2 (state %q)", got)
	}
	code, out, errOut = run(t, "retries", "retry", "--saga-type", "order", "--yes", "--digest", count(), "--api", r.url)
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "published 3 messages") {
		t.Errorf("retries retry printed %q; want 3 messages published", out)
	}
	for _, key := range []string{"r-2", "r-3", "r-4"} {
		r.waitState(t, key, "AwaitingPayment")
		r.waitNoRetry(t, key)
	}
	if code, _, errOut := run(t, "retries", "retry", "--saga-type", "order", "--api", r.url); code != 2 || !strings.Contains(errOut, "--dry-run") {
		t.Errorf("retry without --dry-run or --yes: exit %d, stderr %q; want 2 naming --dry-run", code, errOut)
	}
}

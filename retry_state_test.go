package idem_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// retriesSeen keeps what the store's retry state was each time a handler
// ran.
type retriesSeen struct {
	mu   sync.Mutex
	runs [][]store.Retry
}

func (r *retriesSeen) add(rs []store.Retry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, rs)
}

func (r *retriesSeen) get() [][]store.Retry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs
}

func allRetries(t *testing.T, rr store.RetryRecorder) []store.Retry {
	t.Helper()
	rs, err := rr.QueryRetries(t.Context(), &store.RetryQuery{})
	if err != nil {
		t.Fatalf("QueryRetries: %v", err)
	}
	return rs
}

// A message that fails twice then succeeds: before its second and third
// deliveries the store shows its retry state (attempts 1 then 2, the last
// error, the next attempt); after its success, nothing. A message applied
// at its first delivery leaves no row.
func TestRetryStateRecordedOnFailureClearedOnSuccess(t *testing.T) {
	t.Parallel()
	var b *bundle
	seen := &retriesSeen{}
	m, calls := failingCounter("flaky", func(n int64) error {
		rs, err := b.mstore.Retries(t.Context(), store.Key{SagaType: counterType, Key: "flaky"})
		if err != nil {
			t.Errorf("Retries in the handler: %v", err)
		}
		seen.add(rs)
		switch n {
		case 1:
			b.clock.Advance(time.Second) // the second failure's lane starts a second later
			return errors.New("payment gateway: connection refused <b>1</b>")
		case 2:
			return idem.RetryAfter(3*time.Millisecond, errors.New("payment gateway: 503"))
		}
		return nil
	})
	b = setup(t, &options{machine: m, cfg: idem.Config{MaxAttempts: 5}})
	b.send("inc-ok", Inc{Key: "ok", N: 1})
	b.settle()
	if rs := allRetries(t, b.mstore); len(rs) != 0 {
		t.Fatalf("after a first-try success: got retries %+v, want none", rs)
	}
	b.send("inc-flaky", Inc{Key: "flaky", N: 1})
	b.settle()
	if got := calls.Load(); got != 3 {
		t.Fatalf("handler ran %d times, want 3", got)
	}
	runs := seen.get()
	if len(runs[0]) != 0 {
		t.Errorf("before the first delivery: retries %+v, want none", runs[0])
	}
	if len(runs[1]) != 1 || len(runs[2]) != 1 {
		t.Fatalf("before the second and third deliveries: retries %+v and %+v, want one each", runs[1], runs[2])
	}
	first, second := runs[1][0], runs[2][0]
	if first.ID != "inc-flaky" || first.MessageID != "inc-flaky" || first.SagaType != counterType || first.Key != "flaky" || first.MessageType == "" {
		t.Errorf("retry identity %+v: want inc-flaky of %s/flaky with its type", first, counterType)
	}
	if first.Attempts != 1 || !strings.Contains(first.Error, "connection refused <b>1</b>") ||
		!first.FirstFailedAt.Equal(epoch) || !first.LastFailedAt.Equal(epoch) || !first.NextAttemptAt.After(epoch) {
		t.Errorf("after the first failure: %+v; want attempts 1, its error, failed at %v, a next attempt after it", first, epoch)
	}
	at := epoch.Add(time.Second)
	if second.Attempts != 2 || !strings.Contains(second.Error, "503") || !second.FirstFailedAt.Equal(epoch) ||
		!second.LastFailedAt.Equal(at) || !second.NextAttemptAt.Equal(at.Add(3*time.Millisecond)) {
		t.Errorf("after the second failure: %+v; want attempts 2, the 503 error, first failed %v, last %v, next attempt 3ms later", second, epoch, at)
	}
	if rs := allRetries(t, b.mstore); len(rs) != 0 {
		t.Errorf("after the success: got retries %+v, want none", rs)
	}
	if c, _ := b.counter("flaky"); c.Total != 1 {
		t.Errorf("counter flaky total = %d, want 1", c.Total)
	}
}

// A dead letter supersedes the message's retry state.
func TestRetryStateClearedWhenDeadLettered(t *testing.T) {
	t.Parallel()
	var b *bundle
	var before []store.Retry
	m, _ := failingCounter("doomed", func(n int64) error {
		if n == 1 {
			return errors.New("transient")
		}
		before, _ = b.mstore.Retries(t.Context(), store.Key{SagaType: counterType, Key: "doomed"})
		return idem.Permanent(errors.New("card declined"))
	})
	b = setup(t, &options{machine: m, cfg: idem.Config{MaxAttempts: 5}})
	b.send("inc-doomed", Inc{Key: "doomed", N: 1})
	b.settle()
	if len(b.deadLetters()) != 1 {
		t.Fatalf("got dead letters %+v, want 1", b.deadLetters())
	}
	if len(before) != 1 {
		t.Fatalf("before the second delivery: retries %+v, want one", before)
	}
	if rs := allRetries(t, b.mstore); len(rs) != 0 {
		t.Errorf("after the dead letter: got retries %+v, want none", rs)
	}
}

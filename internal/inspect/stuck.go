package inspect

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// The reasons the stuck view filters by, most urgent first.
const (
	// StuckDeadline: a request of the saga is past its deadline.
	StuckDeadline = "deadline"
	// StuckRetrying: a message to the saga is being retried.
	StuckRetrying = "retrying"
	// StuckTimer: a timer of the saga is overdue.
	StuckTimer = "timer"
	// StuckIdle: no event for a while (the stuck view's own order).
	StuckIdle = "idle"
)

// StuckReasons are the reasons, most urgent first.
var StuckReasons = []string{StuckDeadline, StuckRetrying, StuckTimer, StuckIdle}

// ParseStuckReason checks a reason as the stuck view takes it ("" is any).
func ParseStuckReason(s string) (string, error) {
	for _, r := range StuckReasons {
		if s == r {
			return s, nil
		}
	}
	if s == "" {
		return "", nil
	}
	return "", fmt.Errorf("reason %.40q: want %s", s, strings.Join(StuckReasons, ", "))
}

// Urgent is a saga listed for an urgent reason, and since when.
type Urgent struct {
	Key store.Key
	// Since is when its timer or deadline fell due, or when its message
	// first failed.
	Since time.Time
	// What names the timer, request or message type.
	What string
}

// UrgentSagas lists the sagas of sagaType ("" every type) that are stuck
// for reason (StuckDeadline, StuckTimer or StuckRetrying), most urgent
// first (longest overdue, or failing longest), each once, at most limit.
// It reads the store's overdue timers in due order, or its retries in
// first-failure order, at most MaxScan rows; finished sagas are the
// caller's to leave out. ErrUnsupported when the store cannot list them.
func UrgentSagas(ctx context.Context, st store.Store, reason, sagaType string, now time.Time, limit int) ([]Urgent, error) {
	switch reason {
	case StuckDeadline, StuckTimer:
		tq, ok := st.(readmodel.TimerQuerier)
		if !ok {
			return nil, fmt.Errorf("overdue timers: %w (the store does not implement readmodel.TimerQuerier)", ErrUnsupported)
		}
		return overdueSagas(ctx, tq, reason == StuckDeadline, sagaType, now, limit)
	case StuckRetrying:
		rr, ok := st.(store.RetryRecorder)
		if !ok {
			return nil, fmt.Errorf("retries: %w (the store keeps no retry state)", ErrUnsupported)
		}
		return retryingSagas(ctx, rr, sagaType, limit)
	}
	return nil, fmt.Errorf("urgent sagas: reason %q is not an urgent one", reason)
}

func overdueSagas(ctx context.Context, tq readmodel.TimerQuerier, deadline bool, sagaType string, now time.Time, limit int) ([]Urgent, error) {
	var out []Urgent
	seen := map[store.Key]bool{}
	p := &readmodel.TimerQuery{SagaType: sagaType, DueBefore: now, Limit: 500}
	for read := 0; read < MaxScan && len(out) < limit; {
		ts, err := tq.QueryTimers(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("overdue timers: %w", err)
		}
		for i := range ts {
			t := &ts[i]
			name, isRequest := strings.CutPrefix(t.Name, saga.RequestTimerPrefix)
			k := store.Key{SagaType: t.SagaType, Key: t.Key}
			if isRequest == deadline && !seen[k] && len(out) < limit {
				seen[k] = true
				out = append(out, Urgent{Key: k, Since: t.DueAt, What: name})
			}
		}
		read += len(ts)
		if len(ts) < p.Limit {
			break
		}
		p.After = readmodel.TimerCursorOf(&ts[len(ts)-1])
	}
	return out, nil
}

func retryingSagas(ctx context.Context, rr store.RetryRecorder, sagaType string, limit int) ([]Urgent, error) {
	var out []Urgent
	seen := map[store.Key]bool{}
	q := &store.RetryQuery{SagaType: sagaType, Limit: store.MaxRetryPage}
	for read := 0; read < MaxScan && len(out) < limit; {
		rs, err := rr.QueryRetries(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("retries: %w", err)
		}
		for _, r := range rs {
			k := store.Key{SagaType: r.SagaType, Key: r.Key}
			if r.SagaType != "" && !seen[k] && len(out) < limit {
				seen[k] = true
				out = append(out, Urgent{Key: k, Since: r.FirstFailedAt, What: r.MessageType})
			}
		}
		read += len(rs)
		if len(rs) < q.PageLimit() {
			break
		}
		q.AfterFirstFailedAt, q.AfterID = rs[len(rs)-1].FirstFailedAt, rs[len(rs)-1].ID
	}
	return out, nil
}

package admin

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// stuckFilter is the stuck view's reason and idle time, as given.
type stuckFilter struct {
	Reason string
	Idle   time.Duration
}

// parseStuckFilter reads reason (inspect.StuckReasons) and idle (a Go
// duration such as 30m or 48h: no event for at least that long).
func parseStuckFilter(q url.Values) (stuckFilter, error) {
	var f stuckFilter
	var err error
	if f.Reason, err = inspect.ParseStuckReason(q.Get("reason")); err != nil {
		return f, err
	}
	if v := strings.TrimSpace(q.Get("idle")); v != "" {
		if f.Idle, err = time.ParseDuration(v); err != nil || f.Idle <= 0 {
			return f, fmt.Errorf("idle %.40q: want a duration such as 30m or 48h", v)
		}
	}
	return f, nil
}

// urgent tells whether f lists the sagas of an urgent reason (from the
// timers or the retries) rather than the stuck query's idle order.
func (f stuckFilter) urgent() bool {
	return f.Reason == inspect.StuckDeadline || f.Reason == inspect.StuckTimer || f.Reason == inspect.StuckRetrying
}

// stuckChip is one reason of the stuck view with how many sagas it holds.
type stuckChip struct {
	Reason, Label string
	// Count is how many, up to consolePage; More when there are more.
	Count int
	More  bool
}

var stuckLabels = map[string]string{
	inspect.StuckDeadline: "past deadline", inspect.StuckRetrying: "retrying", inspect.StuckTimer: "timer overdue", inspect.StuckIdle: "idle",
}

// stuckChips counts the urgent reasons, most urgent first (bounded: each
// reads at most consolePage+1 sagas). A reason the store cannot list is
// left out.
func (c *console) stuckChips(ctx context.Context, sagaType string, now time.Time) ([]stuckChip, error) {
	var out []stuckChip
	for _, r := range []string{inspect.StuckDeadline, inspect.StuckRetrying, inspect.StuckTimer} {
		us, err := c.urgentActive(ctx, r, sagaType, now, consolePage+1)
		if err != nil {
			if errors.Is(err, inspect.ErrUnsupported) {
				continue
			}
			return nil, err
		}
		out = append(out, stuckChip{Reason: r, Label: stuckLabels[r], Count: min(len(us), consolePage), More: len(us) > consolePage})
	}
	return out, nil
}

// urgentActive is inspect.UrgentSagas with the sagas that finished or are
// gone left out, loaded.
func (c *console) urgentActive(ctx context.Context, reason, sagaType string, now time.Time, limit int) ([]*store.Instance, error) {
	us, err := inspect.UrgentSagas(ctx, c.st, reason, sagaType, now, limit)
	if err != nil {
		return nil, err
	}
	out := make([]*store.Instance, 0, len(us))
	for _, u := range us {
		in, err := c.load(ctx, u.Key)
		if err != nil {
			return nil, err
		}
		if in != nil && in.Status() == store.StatusActive {
			out = append(out, in)
		}
	}
	return out, nil
}

// stuckPage fills v's rows for the stuck view: with an urgent reason, the
// most urgent sagas of that reason (one page, no cursor); else the stuck
// query (oldest first), no event for at least f.Idle. It reports whether
// it filled the rows.
func (c *console) stuckPage(ctx context.Context, v *instancesView, p *readmodel.InstanceQuery, f stuckFilter, now time.Time) (bool, error) {
	var err error
	if v.Chips, err = c.stuckChips(ctx, p.SagaType, now); err != nil {
		return false, err
	}
	if f.Idle > 0 {
		if before := now.Add(-f.Idle); p.UpdatedBefore.IsZero() || before.Before(p.UpdatedBefore) {
			p.UpdatedBefore = before
		}
	}
	if !f.urgent() {
		return false, nil
	}
	v.Rows, err = c.urgentActive(ctx, f.Reason, p.SagaType, now, consolePage)
	return true, err
}

package admin

import (
	"context"
	"errors"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store/readmodel"
)

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

// stuckPage fills v's rows for the stuck view: with an urgent reason, the
// most urgent sagas of that reason (one page, no cursor); else the stuck
// query (oldest first), no event for at least f.Idle. It reports whether
// it filled the rows.
func (c *console) stuckPage(ctx context.Context, v *instancesView, p *readmodel.InstanceQuery, f stuckFilter, now time.Time) (bool, error) {
	var err error
	if v.Chips, err = c.stuckChips(ctx, p.SagaType, now); err != nil {
		return false, err
	}
	f.bound(p, now)
	if !f.urgent() {
		return false, nil
	}
	v.Rows, err = c.urgentActive(ctx, f.Reason, p.SagaType, now, consolePage)
	return true, err
}

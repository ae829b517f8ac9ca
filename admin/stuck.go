package admin

import (
	"context"
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

// urgentActive is inspect.UrgentSagas with the sagas that finished or are
// gone left out, loaded.
func (p *parts) urgentActive(ctx context.Context, reason, sagaType string, now time.Time, limit int) ([]*store.Instance, error) {
	us, err := inspect.UrgentSagas(ctx, p.st, reason, sagaType, now, limit)
	if err != nil {
		return nil, err
	}
	out := make([]*store.Instance, 0, len(us))
	for _, u := range us {
		in, err := p.load(ctx, u.Key)
		if err != nil {
			return nil, err
		}
		if in != nil && in.Status() == store.StatusActive {
			out = append(out, in)
		}
	}
	return out, nil
}

// stuckAPIFilters are the instance filters that an urgent reason's list
// (inspect.UrgentSagas: one saga type, most urgent first, one page) cannot
// apply.
var stuckAPIFilters = []string{"state", "status", "prefix", "attr", "after", "idle"}

// check refuses, for the API, a reason or an idle time without stuck=true,
// and with an urgent reason the filters its list cannot apply, naming what
// to drop: the console's form never sends them, an API caller must not
// think them applied.
func (f stuckFilter) check(stuck bool, q url.Values) error {
	if !stuck && (f.Reason != "" || f.Idle > 0) {
		return fmt.Errorf("reason and idle filter the stuck view: add stuck=true")
	}
	if !f.urgent() {
		return nil
	}
	for _, name := range stuckAPIFilters {
		if name == "attr" && len(attrFilters(q)) > 0 || name != "attr" && q.Get(name) != "" {
			return fmt.Errorf("reason=%s lists the most urgent sagas of a type, one page: drop %s (or use reason=idle)", f.Reason, name)
		}
	}
	return nil
}

// bound applies f's idle time to p: no event since now less f.Idle.
func (f stuckFilter) bound(p *readmodel.InstanceQuery, now time.Time) {
	if f.Idle > 0 {
		if before := now.Add(-f.Idle); p.UpdatedBefore.IsZero() || before.Before(p.UpdatedBefore) {
			p.UpdatedBefore = before
		}
	}
}

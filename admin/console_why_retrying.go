package admin

import (
	"context"
	"strconv"
	"time"

	"github.com/idemhq/idem/store"
)

// retrying is the verdict of a saga that is not finished and has a
// message being retried: the most urgent answer, since a retried message
// holds back the later messages of its key.
func (p *whyPanel) retrying(in *store.Instance, now time.Time) (string, bool) {
	if len(p.Retries) == 0 || in.Status() == store.StatusFinished {
		return "", false
	}
	r := p.Retries[0]
	for _, x := range p.Retries[1:] {
		if x.Attempts > r.Attempts {
			r = x
		}
	}
	v := "retrying: " + r.MessageType + " failed " + strconv.Itoa(r.Attempts) + " time(s); next attempt "
	if d := r.NextAttemptAt.Sub(now); d > 0 {
		v += "in " + span(d)
	} else {
		v += "due " + span(d) + " ago"
	}
	if n := len(p.Retries); n > 1 {
		v = strconv.Itoa(n) + " messages " + v
	}
	return v, true
}

// stuckReasons says, for each instance of a page of the stuck view, why
// it is listed, the most urgent reason first: a message being retried, a
// request past its deadline, an overdue timer, else how long it has had no
// event in its (non-final) state. Two indexed reads per row (its retries,
// its timers).
func (c *console) stuckReasons(ctx context.Context, rows []*store.Instance, now time.Time) ([]string, error) {
	out := make([]string, len(rows))
	for i, in := range rows {
		k := store.Key{SagaType: in.SagaType, Key: in.Key}
		rs, err := c.retriesOf(ctx, k)
		if err != nil {
			return nil, err
		}
		ts, err := c.st.TimersOf(ctx, k)
		if err != nil {
			return nil, err
		}
		p := buildWhy(whyInput{In: in, Timers: ts, Retries: rs, Now: now})
		out[i] = p.stuckReason(in, now)
	}
	return out, nil
}

// stuckReason is the stuck view's reason for one instance, from its Why
// panel (built without its machine or dead letters).
func (p *whyPanel) stuckReason(in *store.Instance, now time.Time) string {
	if v, ok := p.retrying(in, now); ok {
		return v
	}
	if t, ok := p.mostOverdue(); ok && t.RequestID != "" {
		return "a request is past its deadline by " + span(t.Overdue) + " (" + t.Name + ")"
	} else if ok {
		return "a timer is overdue by " + span(t.Overdue) + " (" + t.Name + ")"
	}
	return "no event for " + span(now.Sub(in.UpdatedAt)) + " in state " + strconv.Quote(in.State)
}

package admin

import (
	"context"
	"strconv"
	"time"

	"github.com/idemhq/idem/store"
)

// retriesOf reads the retry state of the saga k's messages; nil when the
// store keeps none (it is no store.RetryRecorder).
func (s *Server) retriesOf(ctx context.Context, k store.Key) ([]store.Retry, error) {
	rr, ok := s.st.(store.RetryRecorder)
	if !ok {
		return nil, nil
	}
	return rr.Retries(ctx, k)
}

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

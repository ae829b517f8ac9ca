package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// findRetry returns the retry id of saga k.
func (p *parts) findRetry(ctx context.Context, k store.Key, id string) (*store.Retry, error) {
	if p.caps.retries == nil {
		return nil, &errRetryNow{http.StatusNotImplemented, fmt.Sprintf("store %T keeps no retry state", p.st)}
	}
	rs, err := p.retriesOf(ctx, k)
	if err != nil {
		return nil, fmt.Errorf("read the retries of saga %s/%s: %w", k.SagaType, k.Key, err)
	}
	for i := range rs {
		if rs[i].ID == id {
			return &rs[i], nil
		}
	}
	return nil, &errRetryNow{http.StatusNotFound, fmt.Sprintf("no message %q of saga %s/%q is being retried: it was applied, dead-lettered or swept meanwhile", id, k.SagaType, k.Key)}
}

// retryNow publishes r's message again now on behalf of actor, under its
// own ID, after marking the retry (RetryNowAt) so that a failure of the
// copy is recorded even though its transport counts attempts afresh.
func (p *parts) retryNow(ctx context.Context, r *store.Retry, actor string) (idem.Envelope, error) {
	if err := unretryable(r); err != nil {
		return idem.Envelope{}, err
	}
	mark := *r
	mark.RetryNowAt = time.Now()
	if err := p.caps.retries.RecordRetry(ctx, &mark); err != nil {
		return idem.Envelope{}, fmt.Errorf("mark retry %q: %w", r.ID, err)
	}
	env := r.Envelope.Clone()
	if env.Headers == nil {
		env.Headers = map[string]string{}
	}
	env.Headers[transport.HeaderActor] = actor
	if err := p.e.Publish(ctx, env); err != nil {
		if errors.Is(err, idem.ErrInvalidEnvelope) {
			return env, &errRetryNow{http.StatusBadRequest, fmt.Sprintf("message %q was not published again: %v", r.MessageID, err)}
		}
		return env, fmt.Errorf("publish %q again: %w", r.MessageID, err)
	}
	return env, nil
}

// retryBatch retries now the set f selects, if its digest is still
// confirmed. The error is ErrSetChanged, ErrCapped, or a failure after
// res.Done messages were published.
func (p *parts) retryBatch(ctx context.Context, f *inspect.RetryFilter, confirmed, actor string) (*RetryNowResult, error) {
	sel, err := inspect.SelectRetries(ctx, p.st, f)
	switch {
	case err != nil:
		return nil, err
	case sel.Capped:
		return nil, inspect.ErrCapped
	case sel.Digest != confirmed:
		return nil, inspect.ErrSetChanged
	}
	res := &RetryNowResult{}
	for _, rt := range sel.Selected() {
		if rt.Envelope == nil {
			res.Skipped = append(res.Skipped, rt.ID)
			continue
		}
		if _, err := p.retryNow(ctx, &rt, actor); err != nil {
			return res, err
		}
		res.Done++
	}
	return res, nil
}

// retriesOf reads the retry state of the saga k's messages; nil when the
// store keeps none (it is no store.RetryRecorder).
func (p *parts) retriesOf(ctx context.Context, k store.Key) ([]store.Retry, error) {
	rr := p.caps.retries
	if rr == nil {
		return nil, nil
	}
	return rr.Retries(ctx, k)
}

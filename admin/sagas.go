package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
	"github.com/idemhq/idem/transport"
)

// load reads one instance in a unit of work it rolls back; nil when absent.
func (p *parts) load(ctx context.Context, k store.Key) (*store.Instance, error) {
	uow, err := p.st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = uow.Rollback(ctx) }()
	res, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}})
	if err != nil {
		return nil, err
	}
	return res.Instances[k], nil
}

// sagaKeyOf reads the saga a request names.
func (p *parts) sagaKeyOf(r *http.Request) (store.Key, error) {
	typ, raw := r.PathValue("type"), r.PathValue("key")
	key, err := canonKey(raw, p.e.Config().MaxKeyLen)
	if err != nil {
		return store.Key{}, fmt.Errorf("saga key %q is not a valid key: %w", raw, err)
	}
	return store.Key{SagaType: typ, Key: key}, nil
}

// sendEvent publishes ev to saga k on behalf of actor once it has checked
// that the saga's machine is registered here, takes the event's type, and
// that the body correlates to k. The status is the HTTP answer of an
// error.
func (p *parts) sendEvent(ctx context.Context, k store.Key, ev *SendEvent, actor string) (idem.Envelope, int, error) {
	m, ok := p.e.Sagas()[k.SagaType]
	if !ok {
		return idem.Envelope{}, http.StatusNotFound, fmt.Errorf("no saga type %s is registered with this engine", k.SagaType)
	}
	if !slices.Contains(m.MessageTypes(), ev.Type) {
		return idem.Envelope{}, http.StatusBadRequest, fmt.Errorf("saga %s takes no message of type %q: it takes %s", k.SagaType, ev.Type, strings.Join(m.MessageTypes(), ", "))
	}
	_, rawKey, err := m.Decode(ev.Type, ev.Body)
	if err != nil {
		return idem.Envelope{}, http.StatusBadRequest, fmt.Errorf("the body does not fit %s: %v", ev.Type, err)
	}
	if key, err := canonKey(rawKey, p.e.Config().MaxKeyLen); err != nil || key != k.Key {
		return idem.Envelope{}, http.StatusBadRequest, fmt.Errorf("the body correlates to saga key %q, not %q: fix the body", rawKey, k.Key)
	}
	id := ev.ID
	if id == "" {
		id = randomToken()
	}
	env := idem.Envelope{ID: id, Type: ev.Type, CorrelationID: rawKey, Body: ev.Body, Headers: map[string]string{transport.HeaderActor: actor}}
	if err := p.e.Publish(ctx, env); err != nil {
		if errors.Is(err, idem.ErrInvalidEnvelope) {
			return env, http.StatusBadRequest, fmt.Errorf("message %q was not sent: %w", id, err)
		}
		return env, http.StatusServiceUnavailable, fmt.Errorf("message %q was not sent: the queue refused it (see the server log): send it again with the same id, which is safe", id)
	}
	return env, 0, nil
}

// batchQuery reads the filter of a batch action: the instance list's,
// its time range on updated_at included, so that the count and the end
// select what the list shows. A range on a store that cannot apply it is
// refused rather than ignored, which would count more than asked.
func (p *parts) batchQuery(v url.Values) (*readmodel.InstanceQuery, error) {
	q, err := instanceQuery(v)
	if err != nil {
		return nil, err
	}
	if q.Status == store.StatusFinished {
		return nil, errors.New("parameter status: a batch acts on active sagas, and status=finished selects none")
	}
	for _, param := range []string{"from", "to"} {
		if _, _, err := timeRange(url.Values{param: v[param]}, "Updated"); err != nil {
			return nil, fmt.Errorf("parameter %s: %w", param, err)
		}
	}
	if q.UpdatedFrom, q.UpdatedBefore, err = timeRange(v, "Updated"); err != nil {
		return nil, fmt.Errorf("parameters from and to: %w", err)
	}
	if p.caps.instances == nil && (!q.UpdatedFrom.IsZero() || !q.UpdatedBefore.IsZero()) {
		return nil, fmt.Errorf("parameters from and to: store %T cannot select by time: drop them", p.st)
	}
	return q, nil
}

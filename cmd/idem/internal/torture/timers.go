package torture

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// replayStaleTimers is the stale-timer fault: it remembers the timers it
// sees scheduled, and delivers again, once, each one whose saga has moved
// on (the timer fired, or was cancelled or replaced). The engine must
// treat such a delivery as harmless. It returns how many it delivered.
func replayStaleTimers(ctx context.Context, st store.Store, pub transport.Publisher, h *history, seen map[string]store.Timer, replayed map[string]bool) (int, error) {
	ts, err := st.ListTimers(ctx, &store.ListParams{Limit: 200})
	if err != nil {
		return 0, fmt.Errorf("list timers: %w", err)
	}
	for _, t := range ts {
		if !replayed[t.Envelope.ID] && len(seen) < 10000 {
			seen[t.Envelope.ID] = t
		}
	}
	if len(seen) == 0 {
		return 0, nil
	}
	keys := make([]store.Key, 0, len(seen))
	for _, t := range seen {
		keys = append(keys, store.Key{SagaType: t.SagaType, Key: t.Key})
	}
	u, err := st.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer u.Rollback(ctx)
	r, err := u.Load(ctx, &store.LoadParams{Keys: keys})
	if err != nil {
		return 0, fmt.Errorf("load sagas with timers: %w", err)
	}
	var envs []transport.Envelope
	var recs []*Record
	for id, t := range seen {
		in := r.Instances[store.Key{SagaType: t.SagaType, Key: t.Key}]
		if in == nil || in.Timers[t.Name] == id {
			continue // not moved on yet
		}
		envs = append(envs, t.Envelope)
		recs = append(recs, &Record{ID: id, Type: t.Envelope.Type, Kind: kindStaleTimer, Saga: t.SagaType, Key: t.Key, Copies: 1})
		delete(seen, id)
		replayed[id] = true
		if len(envs) == 20 {
			break
		}
	}
	if len(envs) == 0 {
		return 0, nil
	}
	if err := h.append(recs...); err != nil {
		return 0, err
	}
	if err := pub.Publish(ctx, envs); err != nil {
		return 0, fmt.Errorf("deliver stale timers: %w", err)
	}
	return len(envs), nil
}

package cli

import (
	"context"
	"math"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// queryInstances runs sagas ls with --status, --prefix, --stuck or --attr:
// q holds those, p the common flags.
func queryInstances(ctx context.Context, st store.Store, p *store.ListParams, q *readmodel.InstanceQuery) ([]*store.Instance, error) {
	if q.Status != "" && q.Status != store.StatusActive && q.Status != store.StatusFinished {
		return nil, usageErrorf("--status %q: want active or finished", q.Status)
	}
	q.SagaType, q.State, q.Limit = p.SagaType, p.State, p.Limit
	if p.After != "" {
		c, err := parseCursor(p.After)
		if err != nil {
			return nil, err
		}
		q.After = c
	}
	list, err := inspect.Instances(ctx, st, q)
	if err != nil {
		return nil, failed(err)
	}
	return list, nil
}

// parseCursor reads --after: a cursor printed by a previous page.
func parseCursor(s string) (*readmodel.InstanceCursor, error) {
	c, err := inspect.ParseInstanceCursor(s)
	if err != nil {
		return nil, usageErrorf("--after: %v", err)
	}
	return c, nil
}

// sagaKey reads a saga key argument the way the engine reads correlation
// IDs (canon.Key): any Unicode spelling of a key names it. No length limit
// applies: an engine may be configured with a larger one.
func sagaKey(raw string) (string, error) {
	k, err := canon.Key(raw, math.MaxInt)
	if err != nil {
		return "", usageErrorf("saga key %q is not a valid key: %v", raw, err)
	}
	return k, nil
}

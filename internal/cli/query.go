package cli

import (
	"context"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
)

// queryInstances runs sagas ls with --status, --prefix or --stuck: q holds
// those, p the common flags.
func queryInstances(ctx context.Context, st store.Store, p *store.ListParams, q *store.InstanceQuery) ([]*store.Instance, error) {
	if q.Status != "" && q.Status != store.StatusActive && q.Status != store.StatusFinished {
		return nil, usageErrorf("--status %q: want active or finished", q.Status)
	}
	q.SagaType, q.State, q.Limit = p.SagaType, p.State, p.Limit
	if p.After != "" {
		c, err := parseQueryCursor(p.After, q.Stuck)
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

// queryCursor is the --after that continues after in: type NUL key, with
// the update time first when stuck.
func queryCursor(in *store.Instance, stuck bool) string {
	c := in.SagaType + "\x00" + in.Key
	if stuck {
		c = in.UpdatedAt.UTC().Format(time.RFC3339Nano) + "\x00" + c
	}
	return c
}

func parseQueryCursor(s string, stuck bool) (*store.InstanceCursor, error) {
	parts := strings.SplitN(s, "\x00", 3)
	var c store.InstanceCursor
	switch {
	case stuck && len(parts) == 3:
		t, err := time.Parse(time.RFC3339Nano, parts[0])
		if err != nil {
			return nil, usageErrorf("--after %q: want the cursor printed by the previous page", s)
		}
		c = store.InstanceCursor{UpdatedAt: t, SagaType: parts[1], Key: parts[2]}
	case !stuck && len(parts) >= 2:
		c = store.InstanceCursor{SagaType: parts[0], Key: strings.Join(parts[1:], "\x00")}
	default:
		return nil, usageErrorf("--after %q: want the cursor printed by the previous page", s)
	}
	return &c, nil
}

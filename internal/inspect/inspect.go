// Package inspect holds the operations that the admin console, the admin
// API and the CLI share: querying instances (through readmodel.InstanceQuerier
// when the store has it), finding, cancelling and rescheduling timers, and
// selecting dead letters by filter. Everything here goes through the
// public store contract.
package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// MaxScan bounds how many rows a fallback or a filtered scan reads.
const MaxScan = 10_000

// timerScan is MaxScan for the scans of Timers; tests lower it.
var timerScan = MaxScan

const page = 500

// ErrUnsupported is returned for a query the store cannot answer.
var ErrUnsupported = errors.New("not supported by this store")

// Instances returns one page of instances that q selects: through
// readmodel.InstanceQuerier when st implements it, otherwise by paging
// ListInstances and filtering (at most MaxScan rows read; Stuck then
// fails with ErrUnsupported).
func Instances(ctx context.Context, st store.Store, q *readmodel.InstanceQuery) ([]*store.Instance, error) {
	if iq, ok := st.(readmodel.InstanceQuerier); ok {
		ins, err := iq.QueryInstances(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("query instances: %w", err)
		}
		return ins, nil
	}
	if q.Stuck {
		return nil, fmt.Errorf("list stuck instances: %w (the store does not implement readmodel.InstanceQuerier)", ErrUnsupported)
	}
	attrs, ok := canon.AttributeFilter(q.Attributes)
	if !ok {
		return nil, nil
	}
	limit := cmp.Or(q.Limit, 100)
	p := &store.ListParams{SagaType: q.SagaType, State: q.State, Limit: page}
	if q.After != nil {
		p.After = q.After.SagaType + "\x00" + q.After.Key
	}
	var out []*store.Instance
	for read := 0; read < MaxScan && len(out) < limit; {
		ins, err := st.ListInstances(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("list instances: %w", err)
		}
		for _, in := range ins {
			if (q.Status == "" || in.Status() == q.Status) && strings.HasPrefix(in.Key, q.KeyPrefix) && hasAttributes(in, attrs) && len(out) < limit {
				out = append(out, in)
			}
		}
		if len(ins) < page {
			break
		}
		read += len(ins)
		p.After = ins[len(ins)-1].SagaType + "\x00" + ins[len(ins)-1].Key
	}
	return out, nil
}

// countEstimator is a store whose exact counts would read too many rows
// (pgstore): it answers with estimates, and says so.
type countEstimator interface {
	EstimateInstanceCounts(ctx context.Context) ([]readmodel.StateCount, bool, error)
}

// Counts returns instance counts by saga type, state and status. exact is
// false when the store has no InstanceQuerier and more than MaxScan
// instances exist: the counts then cover the first MaxScan. A store that
// estimates large counts (pgstore above pgstore.ExactCountBelow
// instances) is asked for its estimates; exact is then false.
func Counts(ctx context.Context, st store.Store) (counts []readmodel.StateCount, exact bool, err error) {
	if es, ok := st.(countEstimator); ok {
		cs, exact, err := es.EstimateInstanceCounts(ctx)
		if err != nil {
			return nil, false, fmt.Errorf("count instances: %w", err)
		}
		return cs, exact, nil
	}
	if iq, ok := st.(readmodel.InstanceQuerier); ok {
		cs, err := iq.CountInstances(ctx, "")
		if err != nil {
			return nil, false, fmt.Errorf("count instances: %w", err)
		}
		return cs, true, nil
	}
	m := map[readmodel.StateCount]int{}
	p := &store.ListParams{Limit: page}
	exact = true
	for read := 0; ; read += page {
		if read >= MaxScan {
			exact = false
			break
		}
		ins, err := st.ListInstances(ctx, p)
		if err != nil {
			return nil, false, fmt.Errorf("list instances: %w", err)
		}
		for _, in := range ins {
			m[readmodel.StateCount{SagaType: in.SagaType, State: in.State, Status: in.Status()}]++
		}
		if len(ins) < page {
			break
		}
		p.After = ins[len(ins)-1].SagaType + "\x00" + ins[len(ins)-1].Key
	}
	for c, n := range m {
		c.Count = n
		counts = append(counts, c)
	}
	slices.SortFunc(counts, func(a, b readmodel.StateCount) int {
		return cmp.Or(cmp.Compare(a.SagaType, b.SagaType), cmp.Compare(a.State, b.State), cmp.Compare(a.Status, b.Status))
	})
	return counts, exact, nil
}

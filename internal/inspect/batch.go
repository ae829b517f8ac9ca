package inspect

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// MaxBatch bounds how many sagas one batch action selects.
const MaxBatch = 1_000

// ErrSetChanged is wrapped by EndSagas when the confirmation is not a
// count of this filter (another filter, or a count this version did not
// make): count again, then confirm.
var ErrSetChanged = errors.New("the sagas the filter selects changed since they were counted")

// ErrCapped is the error of a caller that refuses a selection of more than
// MaxBatch sagas (Selection.Capped). EndSagas itself ends the MaxBatch
// sagas counted, and the next are counted again.
var ErrCapped = fmt.Errorf("the filter selects more than %d sagas: narrow it, or end them %d at a time", MaxBatch, MaxBatch)

// Selection is the set of active sagas a filter selects, as a batch action
// counts it before it runs: the action then runs only on this set (its
// membership), each saga at the version counted.
type Selection struct {
	Sagas []SagaVersion `json:"sagas"`
	// Digest binds a confirmation to the filter and the set: it names each
	// saga counted (by a hash of its key) with its version. Printable
	// ASCII, to pass back with the action.
	Digest string `json:"digest"`
	// Capped is set when the filter selects more than MaxBatch sagas: the
	// selection is the first MaxBatch, and the action ends those only.
	Capped bool `json:"capped,omitempty"`
}

// SagaVersion is one saga of a Selection, at the version it was counted.
type SagaVersion struct {
	store.Key
	Version int64 `json:"version"`
}

// SelectSagas counts the active sagas q selects (q's After and Limit are
// ignored), at most MaxBatch of them.
func SelectSagas(ctx context.Context, st store.Store, q *readmodel.InstanceQuery) (*Selection, error) {
	p := *q
	p.Status, p.After, p.Before, p.Limit = store.StatusActive, nil, nil, page
	sel := &Selection{}
	for {
		ins, err := Instances(ctx, st, &p)
		if err != nil {
			return nil, err
		}
		for _, in := range ins {
			if len(sel.Sagas) == MaxBatch {
				sel.Capped = true
				break
			}
			sel.Sagas = append(sel.Sagas, SagaVersion{Key: store.Key{SagaType: in.SagaType, Key: in.Key}, Version: in.Version})
		}
		if sel.Capped || len(ins) < p.Limit {
			break
		}
		p.After = readmodel.CursorOf(ins[len(ins)-1])
	}
	sel.Digest = encodeSelection(q, sel.Sagas)
	return sel, nil
}

// BatchResult is what a batch action did.
type BatchResult struct {
	// Done counts the sagas acted on.
	Done int `json:"done"`
	// Skipped are the sagas of the set that moved on (a newer version)
	// between the count and the action: left as they are.
	Skipped []store.Key `json:"skipped,omitempty"`
	// Gone counts the sagas of the set the filter no longer selects (they
	// finished, or changed so that the filter leaves them out): left as
	// they are.
	Gone int `json:"gone,omitempty"`
}

// EndSagas ends the sagas of the selection whose Digest was confirmed that
// the filter q still selects, each at the version counted: one that moved
// on since (an event was applied) is skipped, and one the filter no
// longer selects is counted as gone, never ended unseen; a saga that
// matches now but was not counted is left alone. It fails wrapping
// ErrSetChanged when confirmed is not a count of q, and ErrBadReason for a
// bad reason. It reads the filter's active sagas in the selection's order
// (by key, or least recently updated first with Stuck), at most MaxScan.
func EndSagas(ctx context.Context, st store.Store, q *readmodel.InstanceQuery, confirmed string, e *End) (*BatchResult, error) {
	if err := checkReason(e.Reason); err != nil {
		return nil, err
	}
	counted, err := decodeSelection(q, confirmed)
	if err != nil {
		return nil, err
	}
	res := &BatchResult{}
	found := 0
	p := *q
	// Read in the selection's own order (the stuck view counts the least
	// recently updated first), so that the counted sagas come first.
	p.Status, p.After, p.Before, p.Limit = store.StatusActive, nil, nil, page
	for read := 0; found < len(counted) && read < MaxScan; {
		ins, err := Instances(ctx, st, &p)
		if err != nil {
			return res, err
		}
		for _, in := range ins {
			v, ok := counted[keyHash(store.Key{SagaType: in.SagaType, Key: in.Key})]
			if !ok {
				continue
			}
			found++
			if err := endCounted(ctx, st, in, v, e, res); err != nil {
				return res, err
			}
		}
		read += len(ins)
		if len(ins) < p.Limit {
			break
		}
		p.After = readmodel.CursorOf(ins[len(ins)-1])
	}
	res.Gone = len(counted) - found
	return res, nil
}

// endCounted ends in at the version counted, or notes it skipped.
func endCounted(ctx context.Context, st store.Store, in *store.Instance, version int64, e *End, res *BatchResult) error {
	k := store.Key{SagaType: in.SagaType, Key: in.Key}
	if in.Version != version {
		res.Skipped = append(res.Skipped, k)
		return nil
	}
	one := *e
	one.Version = version
	_, err := EndSaga(ctx, st, k, &one)
	switch {
	case err == nil:
		res.Done++
	case errors.Is(err, store.ErrConflict), errors.Is(err, ErrFinished), errors.Is(err, store.ErrNotFound):
		res.Skipped = append(res.Skipped, k)
	default:
		return err
	}
	return nil
}

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

// ErrSetChanged is wrapped by EndSagas when the filter no longer selects
// the set that was counted: count again, then confirm.
var ErrSetChanged = errors.New("the sagas the filter selects changed since they were counted")

// ErrCapped is wrapped by EndSagas when the filter selects more than
// MaxBatch sagas.
var ErrCapped = fmt.Errorf("the filter selects more than %d sagas: narrow it", MaxBatch)

// Selection is the set of active sagas a filter selects, as a batch action
// counts it before it runs: the action then runs only on this set, each
// saga at the version counted.
type Selection struct {
	Sagas []SagaVersion `json:"sagas"`
	// Digest binds a confirmation to the set: printable ASCII, to pass back
	// with the action.
	Digest string `json:"digest"`
	// Capped is set when the filter selects more than MaxBatch sagas:
	// narrow it; no batch action runs on a capped selection.
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
	sel.Digest = digest(sel.Sagas)
	return sel, nil
}

// digest hashes a selection, each field length-prefixed.
func digest(sagas []SagaVersion) string {
	d := newDigester()
	for _, s := range sagas {
		d.str(s.SagaType)
		d.str(s.Key.Key)
		d.num(s.Version)
	}
	return d.sum()
}

// BatchResult is what a batch action did.
type BatchResult struct {
	// Done counts the sagas acted on.
	Done int `json:"done"`
	// Skipped are the sagas of the set that moved on (or finished) between
	// the count and the action: left as they are.
	Skipped []store.Key `json:"skipped,omitempty"`
}

// EndSagas ends every saga of the selection q makes, provided it is still
// the one whose Digest was confirmed; each saga is ended only at the
// version counted, so that one that moved on in between is skipped, never
// ended unseen. It fails wrapping ErrSetChanged when the set differs, and
// ErrBadReason for a bad reason.
func EndSagas(ctx context.Context, st store.Store, q *readmodel.InstanceQuery, confirmed string, e *End) (*BatchResult, error) {
	if err := checkReason(e.Reason); err != nil {
		return nil, err
	}
	sel, err := SelectSagas(ctx, st, q)
	if err != nil {
		return nil, err
	}
	if sel.Capped {
		return nil, ErrCapped
	}
	if sel.Digest != confirmed {
		return nil, ErrSetChanged
	}
	res := &BatchResult{}
	for _, s := range sel.Sagas {
		one := *e
		one.Version = s.Version
		_, err := EndSaga(ctx, st, s.Key, &one)
		switch {
		case err == nil:
			res.Done++
		case errors.Is(err, store.ErrConflict), errors.Is(err, ErrFinished), errors.Is(err, store.ErrNotFound):
			res.Skipped = append(res.Skipped, s.Key)
		default:
			return res, err
		}
	}
	return res, nil
}

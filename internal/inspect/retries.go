package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/idemhq/idem/store"
)

// ErrNoRetryState is returned when the store keeps no retry state (it is
// no store.RetryRecorder).
var ErrNoRetryState = errors.New("the store keeps no retry state")

// RetryFilter selects retrying messages for a batch retry now. The zero
// value selects every one.
type RetryFilter struct {
	// SagaType and MessageType, when set, select those types only.
	SagaType    string
	MessageType string
	// IDs, when set, selects those retries only (a console's checkboxes).
	IDs []string
}

// RetrySelection is the set of retrying messages a filter selects, as a
// batch retry now counts it before it runs: the action then runs only on
// this set, each message at the attempts counted.
type RetrySelection struct {
	Retries []RetryAttempts `json:"retries"`
	// Digest binds a confirmation to the set (see Selection.Digest).
	Digest string `json:"digest"`
	// Capped is set when the filter selects more than MaxBatch messages:
	// narrow it; no batch action runs on a capped selection.
	Capped bool `json:"capped,omitempty"`
	// Unretryable counts the messages of the set whose retry was recorded
	// without an envelope: they are skipped.
	Unretryable int `json:"unretryable,omitempty"`

	all []store.Retry
}

// RetryAttempts is one message of a RetrySelection.
type RetryAttempts struct {
	ID       string `json:"id"`
	SagaType string `json:"saga_type"`
	Key      string `json:"key"`
	Attempts int    `json:"attempts"`
}

// Selected returns the retries of the selection, envelopes included.
func (s *RetrySelection) Selected() []store.Retry { return s.all }

// SelectRetries counts the retrying messages f selects, at most MaxBatch
// of them, in the order of store.RetryRecorder.QueryRetries.
func SelectRetries(ctx context.Context, st store.Store, f *RetryFilter) (*RetrySelection, error) {
	rr, ok := st.(store.RetryRecorder)
	if !ok {
		return nil, ErrNoRetryState
	}
	q := &store.RetryQuery{SagaType: f.SagaType, Limit: page}
	sel := &RetrySelection{Retries: []RetryAttempts{}}
	for {
		rs, err := rr.QueryRetries(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("select retries: %w", err)
		}
		for _, r := range rs {
			if !f.matches(&r) {
				continue
			}
			if len(sel.all) == MaxBatch {
				sel.Capped = true
				break
			}
			sel.add(r)
		}
		if sel.Capped || len(rs) < q.PageLimit() {
			break
		}
		last := rs[len(rs)-1]
		q.AfterFirstFailedAt, q.AfterID = last.FirstFailedAt, last.ID
	}
	d := newDigester()
	for _, r := range sel.Retries {
		d.str(r.ID)
		d.num(int64(r.Attempts))
	}
	sel.Digest = d.sum()
	return sel, nil
}

func (f *RetryFilter) matches(r *store.Retry) bool {
	return (f.MessageType == "" || r.MessageType == f.MessageType) && (len(f.IDs) == 0 || slices.Contains(f.IDs, r.ID))
}

func (s *RetrySelection) add(r store.Retry) {
	s.all = append(s.all, r)
	s.Retries = append(s.Retries, RetryAttempts{ID: r.ID, SagaType: r.SagaType, Key: r.Key, Attempts: r.Attempts})
	if r.Envelope == nil {
		s.Unretryable++
	}
}

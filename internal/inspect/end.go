package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	idemids "github.com/idemhq/idem/internal/ids"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

// EndEventType is the journal's event type of a saga an operator ended.
const EndEventType = "idem.end"

// MaxReasonLen bounds the reason an operator gives for ending a saga, in
// bytes.
const MaxReasonLen = 1000

// ErrFinished is wrapped by EndSaga when the saga has finished already.
var ErrFinished = errors.New("the saga has finished already")

// ErrBadReason is wrapped by EndSaga when the reason is missing, too long
// or not UTF-8.
var ErrBadReason = errors.New("bad reason")

// End says why, by whom and when a saga is ended.
type End struct {
	// Reason is required: the journal keeps it, and the operator who reads
	// the history later needs it. At most MaxReasonLen bytes of UTF-8.
	Reason string
	// Actor is who ends it: a console session or an API token's name.
	Actor string
	// Version, when not 0, is the version the operator saw: the saga is
	// ended only if it is still at that version.
	Version int64
	// Now is the time of the end.
	Now time.Time
}

// endReason is the payload of the journal entry EndSaga writes.
type endReason struct {
	Reason string `json:"reason"`
}

// checkReason names what is wrong with a reason.
func checkReason(r string) error {
	switch {
	case r == "":
		return fmt.Errorf("%w: a reason is required: say why the saga is ended", ErrBadReason)
	case len(r) > MaxReasonLen:
		return fmt.Errorf("%w: the reason is %d bytes: keep it to %d", ErrBadReason, len(r), MaxReasonLen)
	case !utf8.ValidString(r):
		return fmt.Errorf("%w: the reason is not valid UTF-8", ErrBadReason)
	}
	return nil
}

// EndSaga moves the saga k to saga.Ended, a final state, in one unit of
// work: it cancels its timers (pending requests' deadlines included) and
// journals the end with its reason and actor. The engine then ignores
// every event for the saga, and the sweeper removes it after the finished
// sagas' retention. It fails wrapping store.ErrNotFound when there is no
// such saga, ErrFinished when it has finished already, and
// store.ErrConflict when it changed meanwhile (or is no longer at
// e.Version).
func EndSaga(ctx context.Context, st store.Store, k store.Key, e *End) (*store.JournalEntry, error) {
	if err := checkReason(e.Reason); err != nil {
		return nil, err
	}
	uow, err := st.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("end saga: %w", err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	res, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}})
	if err != nil {
		return nil, fmt.Errorf("end saga: load: %w", err)
	}
	in := res.Instances[k]
	switch {
	case in == nil:
		return nil, fmt.Errorf("end saga %s/%q: %w", k.SagaType, k.Key, store.ErrNotFound)
	case in.Status() == store.StatusFinished:
		return nil, fmt.Errorf("end saga %s/%q: %w (in state %s)", k.SagaType, k.Key, ErrFinished, in.State)
	case e.Version != 0 && in.Version != e.Version:
		return nil, fmt.Errorf("end saga %s/%q: it is at version %d, not %d: %w", k.SagaType, k.Key, in.Version, e.Version, store.ErrConflict)
	}
	// The stored timers too, should any have outlived the instance's map.
	stored, _, err := Timers(ctx, st, &TimerFilter{SagaType: k.SagaType, Key: k.Key})
	if err != nil {
		return nil, fmt.Errorf("end saga: list its timers: %w", err)
	}
	ch, entry := endChanges(in, stored, e)
	if err := uow.Commit(ctx, ch); err != nil {
		return nil, fmt.Errorf("end saga %s/%q: %w", k.SagaType, k.Key, err)
	}
	return entry, nil
}

// endChanges are the writes that end in.
func endChanges(in *store.Instance, stored []store.Timer, e *End) (*store.Changes, *store.JournalEntry) {
	up := *in
	up.State, up.FinishedAt, up.UpdatedAt, up.Timers = string(saga.Ended), e.Now, e.Now, nil
	ch := &store.Changes{Updates: []*store.Instance{&up}}
	names := slices.Collect(maps.Keys(in.Timers))
	for _, t := range stored {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		ch.CancelTimers = append(ch.CancelTimers, store.TimerKey{SagaType: in.SagaType, Key: in.Key, Name: name})
	}
	payload, _ := json.Marshal(endReason{Reason: e.Reason}) // a string field: cannot fail
	entry := store.JournalEntry{
		SagaType: in.SagaType, Key: in.Key,
		MessageID: idemids.Derive(EndEventType, in.SagaType, in.Key, fmt.Sprint(in.Version)),
		EventType: EndEventType, FromState: in.State, ToState: string(saga.Ended),
		Version: in.Version + 1, At: e.Now,
		JournalDetail: store.JournalDetail{Payload: payload, Actor: e.Actor},
	}
	ch.Journal = []store.JournalEntry{entry}
	return ch, &entry
}

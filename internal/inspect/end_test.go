package inspect_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Ending a saga moves it to saga.Ended, finished, with its timers
// cancelled and one journal entry carrying the reason and the actor; a
// second end, a missing saga, a stale version and a bad reason are
// refused with the errors the console and the API map to answers.
func TestEndSaga(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			now := time.Now().UTC().Truncate(time.Millisecond)
			k := store.Key{SagaType: "purchase-order", Key: "PO-<script>"}
			in := &store.Instance{SagaType: k.SagaType, Key: k.Key, State: "AwaitingApproval", Data: []byte(`{}`), Version: 1,
				CreatedAt: now, UpdatedAt: now, Timers: map[string]string{"approval": "t-1", "reminder": "t-2"}}
			var timers []store.Timer
			for name, id := range in.Timers {
				timers = append(timers, store.Timer{SagaType: k.SagaType, Key: k.Key, Name: name, DueAt: now.Add(time.Hour),
					Envelope: transport.Envelope{ID: id, Type: "Timeout", Body: []byte(`{}`)}})
			}
			commit(t, st, &store.Changes{Inserts: []*store.Instance{in}, Timers: timers})

			bad := []struct {
				end  inspect.End
				want error
			}{
				{inspect.End{Reason: ""}, inspect.ErrBadReason},
				{inspect.End{Reason: strings.Repeat("x", inspect.MaxReasonLen+1)}, inspect.ErrBadReason},
				{inspect.End{Reason: "bad \xff"}, inspect.ErrBadReason},
				{inspect.End{Reason: "stale", Version: 7}, store.ErrConflict},
			}
			for _, b := range bad {
				if _, err := inspect.EndSaga(ctx, st, k, &b.end); !errors.Is(err, b.want) {
					t.Errorf("EndSaga(%+.40v): got %v, want %v", b.end, err, b.want)
				}
			}
			if _, err := inspect.EndSaga(ctx, st, store.Key{SagaType: k.SagaType, Key: "absent"}, &inspect.End{Reason: "r"}); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("EndSaga of a missing saga: got %v, want store.ErrNotFound", err)
			}

			reason := "supplier gone <b>bankrupt</b>\x00"
			entry, err := inspect.EndSaga(ctx, st, k, &inspect.End{Reason: reason, Actor: "api: alice", Version: 1, Now: now})
			if err != nil {
				t.Fatalf("EndSaga: %v", err)
			}
			got := load(t, st, k)
			if got.State != string(saga.Ended) || got.Status() != store.StatusFinished || got.Version != 2 || len(got.Timers) != 0 {
				t.Errorf("after EndSaga: state %q, status %s, version %d, timers %v; want %s, finished, 2, none", got.State, got.Status(), got.Version, got.Timers, saga.Ended)
			}
			left, _, err := inspect.Timers(ctx, st, &inspect.TimerFilter{SagaType: k.SagaType, Key: k.Key})
			if err != nil || len(left) != 0 {
				t.Errorf("timers after EndSaga: %d, %v; want none", len(left), err)
			}
			journal, err := st.Journal(ctx, k)
			if err != nil || len(journal) != 1 {
				t.Fatalf("journal: %d entries, %v; want 1", len(journal), err)
			}
			j := journal[0]
			var payload struct{ Reason string }
			if err := json.Unmarshal(j.Payload, &payload); err != nil || payload.Reason != reason {
				t.Errorf("journal payload %q: reason %q, %v; want %q", j.Payload, payload.Reason, err, reason)
			}
			if j.EventType != inspect.EndEventType || j.FromState != "AwaitingApproval" || j.ToState != string(saga.Ended) || j.Actor != "api: alice" || j.Version != 2 || j.MessageID != entry.MessageID {
				t.Errorf("journal entry %+v: want %s from AwaitingApproval to %s by api: alice at version 2", j, inspect.EndEventType, saga.Ended)
			}
			if _, err := inspect.EndSaga(ctx, st, k, &inspect.End{Reason: "again"}); !errors.Is(err, inspect.ErrFinished) {
				t.Errorf("second EndSaga: got %v, want ErrFinished", err)
			}
		})
	}
}

func commit(t *testing.T, st store.Store, ch *store.Changes) {
	t.Helper()
	uow, err := st.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(t.Context(), ch); err != nil {
		t.Fatal(err)
	}
}

func load(t *testing.T, st store.Store, k store.Key) *store.Instance {
	t.Helper()
	uow, err := st.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = uow.Rollback(t.Context()) }()
	res, err := uow.Load(t.Context(), &store.LoadParams{Keys: []store.Key{k}})
	if err != nil || res.Instances[k] == nil {
		t.Fatalf("load %v: %v", k, err)
	}
	return res.Instances[k]
}

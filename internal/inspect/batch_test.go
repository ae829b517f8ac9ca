package inspect_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// A filter that selects more than MaxBatch sagas is not refused: the
// selection is the first MaxBatch, an end ends those, and the next count
// selects the rest. A count of one filter does not end another's.
func TestEndSagasInBatches(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			now := time.Now().UTC().Truncate(time.Millisecond)
			const n = inspect.MaxBatch + 5
			ins := make([]*store.Instance, n)
			for i := range ins {
				ins[i] = &store.Instance{SagaType: "po", Key: fmt.Sprintf("P-%05d", i), State: "Open", Data: []byte(`{}`), Version: 1, CreatedAt: now, UpdatedAt: now}
			}
			commit(t, st, &store.Changes{Inserts: ins})
			q := &readmodel.InstanceQuery{SagaType: "po", KeyPrefix: "P-"}
			sel, err := inspect.SelectSagas(ctx, st, q)
			if err != nil || !sel.Capped || len(sel.Sagas) != inspect.MaxBatch {
				t.Fatalf("select %d: %d sagas, capped %v, %v; want the first %d, capped", n, len(sel.Sagas), sel.Capped, err, inspect.MaxBatch)
			}
			other := &readmodel.InstanceQuery{SagaType: "po", KeyPrefix: "P-0000"}
			if _, err := inspect.EndSagas(ctx, st, other, sel.Digest, &inspect.End{Reason: "r", Now: now}); !errors.Is(err, inspect.ErrSetChanged) {
				t.Errorf("end another filter with this count: %v, want ErrSetChanged", err)
			}
			res, err := inspect.EndSagas(ctx, st, q, sel.Digest, &inspect.End{Reason: "r", Now: now})
			if err != nil || res.Done != inspect.MaxBatch {
				t.Fatalf("end the first batch: %+v, %v; want %d done", res, err, inspect.MaxBatch)
			}
			sel, err = inspect.SelectSagas(ctx, st, q)
			if err != nil || sel.Capped || len(sel.Sagas) != 5 {
				t.Fatalf("recount: %d sagas, capped %v, %v; want the last 5", len(sel.Sagas), sel.Capped, err)
			}
			if res, err := inspect.EndSagas(ctx, st, q, sel.Digest, &inspect.End{Reason: "r", Now: now}); err != nil || res.Done != 5 {
				t.Errorf("end the rest: %+v, %v; want 5 done", res, err)
			}
		})
	}
}

// A batch end from the stuck view ends the sagas the stuck view counted
// (the least recently updated), even when their keys sort after the
// scan's bound: it reads in the selection's order, not by key. Before,
// the 50 most-stuck sagas here were reported gone and left running.
func TestEndStuckSagasInTheirOrder(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			now := time.Now().UTC().Truncate(time.Millisecond)
			const n = inspect.MaxScan + 50
			ins := make([]*store.Instance, n)
			for i := range ins {
				at := now
				if i >= inspect.MaxScan { // the last keys are the most stuck
					at = now.Add(-48 * time.Hour)
				}
				ins[i] = &store.Instance{SagaType: "po", Key: fmt.Sprintf("P-%05d", i), State: "Open", Data: []byte(`{}`), Version: 1, CreatedAt: at, UpdatedAt: at}
			}
			commit(t, st, &store.Changes{Inserts: ins})
			q := &readmodel.InstanceQuery{SagaType: "po", Stuck: true}
			sel, err := inspect.SelectSagas(ctx, st, q)
			if err != nil || len(sel.Sagas) != inspect.MaxBatch || sel.Sagas[0].Key.Key != fmt.Sprintf("P-%05d", inspect.MaxScan) {
				t.Fatalf("select stuck: %d sagas, first %v, %v; want %d, the most stuck first", len(sel.Sagas), sel.Sagas[0], err, inspect.MaxBatch)
			}
			res, err := inspect.EndSagas(ctx, st, q, sel.Digest, &inspect.End{Reason: "r", Now: now})
			if err != nil || res.Done != inspect.MaxBatch || res.Gone != 0 {
				t.Fatalf("end the stuck selection: done %d, gone %d, %v; want %d done, none gone", res.Done, res.Gone, err, inspect.MaxBatch)
			}
			if _, err := inspect.EndSagas(ctx, st, &readmodel.InstanceQuery{SagaType: "po"}, sel.Digest, &inspect.End{Reason: "r", Now: now}); !errors.Is(err, inspect.ErrSetChanged) {
				t.Errorf("end the stuck count without the stuck order: %v, want ErrSetChanged", err)
			}
		})
	}
}

package pgstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/readmodel"
)

// Above the bound, the count carries the planner's estimate.
func TestCountAboveTheBoundIsEstimated(t *testing.T) {
	s := openStore(t, pgstore.Config{})
	var ins []*store.Instance
	for i := range 30 {
		ins = append(ins, &store.Instance{SagaType: "a", Key: fmt.Sprintf("k%02d", i), State: "S", Data: []byte(`{}`), Version: 1, CreatedAt: time.Now(), UpdatedAt: time.Now()})
	}
	ctx := t.Context()
	uow, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &store.Changes{Inserts: ins}); err != nil {
		t.Fatal(err)
	}
	c, err := s.CountInstanceQuery(ctx, &readmodel.InstanceQuery{SagaType: "a"}, 10)
	if err != nil {
		t.Fatalf("count: got error %v, want nil", err)
	}
	if c.Exact || c.N != 10 || c.Estimate < 1 {
		t.Errorf("count of 30 with bound 10: got %+v, want not exact, N 10 and an estimate", c)
	}
}

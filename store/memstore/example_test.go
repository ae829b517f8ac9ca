package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

func ExampleNew() {
	ctx := context.Background()
	s := memstore.New(nil)
	defer s.Close()
	k := store.Key{SagaType: "order", Key: "o-42"}
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

	// First unit of work: the instance does not exist yet, so insert it.
	uow, err := s.Begin(ctx)
	if err != nil {
		panic(err)
	}
	res, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}})
	if err != nil {
		panic(err)
	}
	fmt.Println("found:", res.Instances[k] != nil)
	err = uow.Commit(ctx, &store.Changes{
		Inserts: []*store.Instance{{
			SagaType: k.SagaType, Key: k.Key, State: "Placed", Data: []byte(`{}`),
			Version: 1, CreatedAt: now, UpdatedAt: now,
		}},
	})
	if err != nil {
		panic(err)
	}

	// Second unit of work: update the version that was loaded.
	uow, err = s.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer uow.Rollback(ctx)
	res, err = uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}})
	if err != nil {
		panic(err)
	}
	in := res.Instances[k]
	fmt.Println("loaded:", in.State, "version", in.Version)
	in.State = "Paid"
	if err := uow.Commit(ctx, &store.Changes{Updates: []*store.Instance{in}}); err != nil {
		panic(err)
	}

	// Committing the same stale version again is a conflict.
	stale, _ := s.Begin(ctx)
	err = stale.Commit(ctx, &store.Changes{Updates: []*store.Instance{in}})
	fmt.Println("conflict:", errors.Is(err, store.ErrConflict))
	// Output:
	// found: false
	// loaded: Placed version 1
	// conflict: true
}

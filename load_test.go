package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

type loadDoc struct {
	Sum   int    `json:"sum"`
	Label string `json:"label"`
}

func TestLoadInstance(t *testing.T) {
	ctx := context.Background()
	m := saga.New[loadDoc]("loadtest")
	open := m.State("Open")
	ev := saga.NewEvent[Added](m, func(a Added) string { return a.Tally })
	m.Initially(saga.When(ev).TransitionTo(open))
	// Version 1 documents had no label; the upgrade adds one.
	m.Upgrade(1, func(old json.RawMessage) (json.RawMessage, error) {
		var d map[string]any
		if err := json.Unmarshal(old, &d); err != nil {
			return nil, err
		}
		d["label"] = "upgraded"
		return json.Marshal(d)
	})

	st := memstore.New(nil)
	defer st.Close()
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	err = uow.Commit(ctx, &store.Changes{Inserts: []*store.Instance{
		{SagaType: "loadtest", Key: "a", State: string(open), Data: []byte(`{"sum":7}`), SchemaVersion: 1, Version: 1, CreatedAt: now, UpdatedAt: now},
		{SagaType: "loadtest", Key: "bad", State: string(open), Data: []byte(`{"sum":"x"}`), SchemaVersion: 2, Version: 1, CreatedAt: now, UpdatedAt: now},
	}})
	if err != nil {
		t.Fatal(err)
	}

	// The key is canonicalised as the engine does: surrounding space trimmed.
	snap, err := idem.LoadInstance(ctx, st, m, "  a ")
	if err != nil {
		t.Fatal(err)
	}
	if snap == nil || snap.Data.Sum != 7 || snap.Data.Label != "upgraded" || snap.Instance.State != "Open" {
		t.Fatalf("got %+v, want sum 7, label upgraded, state Open", snap)
	}

	if snap, err := idem.LoadInstance(ctx, st, m, "absent"); snap != nil || err != nil {
		t.Fatalf("absent: got %+v, %v; want nil, nil", snap, err)
	}
	if _, err := idem.LoadInstance(ctx, st, m, "bad"); !errors.Is(err, saga.ErrSchema) {
		t.Fatalf("undecodable document: got %v, want an error wrapping saga.ErrSchema", err)
	}
	if _, err := idem.LoadInstance(ctx, st, m, ""); err == nil {
		t.Fatal("empty key: got nil error, want the canonicalisation error")
	}
}

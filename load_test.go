package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
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

// An engine with a MaxKeyLen above the default stores longer keys;
// LoadInstance, which knows no engine, must still find them.
func TestLoadInstanceKeyLongerThanDefaultLimit(t *testing.T) {
	ctx := context.Background()
	m := saga.New[loadDoc]("loadlong")
	open := m.State("Open")
	ev := saga.NewEvent[Added](m, func(a Added) string { return a.Tally })
	m.Initially(saga.When(ev).TransitionTo(open))
	st := memstore.New(nil)
	defer st.Close()
	e, err := idem.NewEngine(st, memtransport.New(nil), &idem.Config{MaxKeyLen: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Config().MaxKeyLen; got != 1024 {
		t.Errorf("MaxKeyLen: got %d, want 1024", got)
	}
	long := strings.Repeat("k", 600)
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	err = uow.Commit(ctx, &store.Changes{Inserts: []*store.Instance{
		{SagaType: "loadlong", Key: long, State: string(open), Data: []byte(`{"sum":1}`), SchemaVersion: 1, Version: 1, CreatedAt: now, UpdatedAt: now},
	}})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := idem.LoadInstance(ctx, st, m, long)
	if err != nil || snap == nil || snap.Data.Sum != 1 {
		t.Fatalf("load a key of %d bytes: got %+v, %v; want the instance", len(long), snap, err)
	}
	if _, err := idem.LoadInstance(ctx, st, m, "bad\x00key"); err == nil {
		t.Fatal("key with a control character: got nil error, want the canonicalisation error")
	}
}

package idem

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

// Snapshot is one saga instance as read by LoadInstance: the stored
// instance and its state document decoded into S.
type Snapshot[S any] struct {
	// Instance is the stored instance; Instance.Data holds the raw
	// document Data was decoded from.
	Instance *store.Instance
	// Data is the decoded (and upgraded) state document.
	Data S
}

// LoadInstance reads the instance of machine m with the given key from st
// and decodes its state document, for code that shows saga state outside a
// transition (an HTTP status endpoint, say). The key is canonicalised as
// the engine canonicalises correlation keys, but with no length limit:
// whatever Config.MaxKeyLen the engine that wrote st had, a key longer
// than it was never stored and is simply absent. An absent instance is nil
// with a nil error; an invalid key (empty, not UTF-8, with a control
// character), a store error or a document that does not decode (wrapping
// saga.ErrSchema) is an error. The read is a snapshot: it opens a unit of
// work, loads, and rolls back.
func LoadInstance[S any](ctx context.Context, st store.Store, m *saga.Machine[S], key string) (*Snapshot[S], error) {
	k, err := canon.Key(key, 3*len(key)+1) // NFC makes a string at most three times longer
	if err != nil {
		return nil, fmt.Errorf("idem: load %s/%q: %w", m.Name(), key, err)
	}
	uow, err := st.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("idem: load %s/%s: %w", m.Name(), k, err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	sk := store.Key{SagaType: m.Name(), Key: k}
	res, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{sk}})
	if err != nil {
		return nil, fmt.Errorf("idem: load %s/%s: %w", m.Name(), k, err)
	}
	inst := res.Instances[sk]
	if inst == nil {
		return nil, nil
	}
	data, err := m.DecodeData(inst.Data, inst.SchemaVersion)
	if err != nil {
		return nil, fmt.Errorf("idem: load %s/%s: %w", m.Name(), k, err)
	}
	return &Snapshot[S]{Instance: inst, Data: data}, nil
}

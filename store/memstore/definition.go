package memstore

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/store"
)

var _ store.DefinitionStore = (*Store)(nil)

// RecordDefinitions records defs at at. Every string is kept as it is.
func (s *Store) RecordDefinitions(ctx context.Context, at time.Time, defs []store.Definition) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "record definitions"); err != nil {
		return err
	}
	if s.defs == nil {
		s.defs = make(map[[2]string]*store.Definition)
	}
	for _, d := range defs {
		k := [2]string{d.SagaType, d.Fingerprint}
		if old := s.defs[k]; old != nil {
			old.LastSeen = maxTime(old.LastSeen, at)
			continue
		}
		s.defs[k] = &store.Definition{SagaType: d.SagaType, Fingerprint: d.Fingerprint,
			Description: bytes.Clone(d.Description), FirstSeen: at, LastSeen: at}
	}
	return nil
}

// Definitions returns the definitions of sagaType, the first seen first,
// with the replicas whose heartbeats name them.
func (s *Store) Definitions(ctx context.Context, sagaType string) ([]store.Definition, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "definitions"); err != nil {
		return nil, err
	}
	var out []store.Definition
	for _, d := range s.defs {
		if d.SagaType != sagaType {
			continue
		}
		c := *d
		c.Description = bytes.Clone(d.Description)
		for id, r := range s.replicas {
			if fp, ok := r.Definitions[sagaType]; ok && fp == d.Fingerprint {
				c.Replicas = append(c.Replicas, id)
			}
		}
		slices.Sort(c.Replicas)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b store.Definition) int {
		return cmp.Or(a.FirstSeen.Compare(b.FirstSeen), strings.Compare(a.Fingerprint, b.Fingerprint))
	})
	return out, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

var _ store.TokenStore = (*Store)(nil)

// loadTokens returns which of ids exist. The caller holds s.mu.
func (s *Store) loadTokens(ids []string) map[string]bool {
	if len(ids) == 0 {
		return nil
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		if _, ok := s.tokens[id]; ok {
			out[id] = true
		}
	}
	return out
}

// validateTokens checks that every claimed token exists, once. The caller
// holds s.mu for writing.
func (s *Store) validateTokens(c *store.Changes) error {
	claimed := make(map[string]bool, len(c.ClaimTokens))
	for _, id := range c.ClaimTokens {
		if _, ok := s.tokens[id]; !ok || claimed[id] {
			return fmt.Errorf("memstore: commit: claim token %q: already claimed: %w", id, store.ErrConflict)
		}
		claimed[id] = true
	}
	return nil
}

// applyTokens mints and claims. The caller holds s.mu for writing.
func (s *Store) applyTokens(c *store.Changes) {
	s.mint(c.MintTokens)
	for _, id := range c.ClaimTokens {
		delete(s.tokens, id)
	}
}

func (s *Store) mint(ts []store.Token) {
	if len(ts) > 0 && s.tokens == nil {
		s.tokens = make(map[string]time.Time)
	}
	for _, t := range ts {
		if _, ok := s.tokens[t.ID]; !ok {
			s.tokens[t.ID] = t.MintedAt
		}
	}
}

// MintTokens stores tokens outside any unit of work; existing tokens are
// left as they are.
func (s *Store) MintTokens(ctx context.Context, ts []store.Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "mint tokens"); err != nil {
		return err
	}
	s.mint(ts)
	return nil
}

// CountTokens counts the tokens not yet claimed.
func (s *Store) CountTokens(ctx context.Context) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "count tokens"); err != nil {
		return 0, err
	}
	return len(s.tokens), nil
}

package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
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

var _ store.TokenSweeper = (*Store)(nil)

// staleTokens returns the IDs of the tokens minted before p.MintedBefore,
// oldest first. The caller holds s.mu.
func (s *Store) staleTokens(p *store.StaleTokens) []string {
	var ids []string
	for id, at := range s.tokens {
		if at.Before(p.MintedBefore) && s.dead[store.TokenDedupID(id)] == nil {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b string) int {
		return cmp.Or(s.tokens[a].Compare(s.tokens[b]), strings.Compare(a, b))
	})
	return ids
}

// CountStaleTokens counts the tokens minted before p.MintedBefore, up to
// p.Limit; see store.TokenSweeper.
func (s *Store) CountStaleTokens(ctx context.Context, p *store.StaleTokens) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("memstore: count %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "count stale tokens"); err != nil {
		return 0, err
	}
	return min(len(s.staleTokens(p)), p.Limit), nil
}

// SweepTokens reads at most p.Limit tokens minted before p.MintedBefore
// and after p.After, oldest first, and deletes those whose message has no
// dead letter; see store.TokenSweeper.
func (s *Store) SweepTokens(ctx context.Context, p *store.StaleTokens) (*store.TokenSweep, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("memstore: sweep %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "sweep tokens"); err != nil {
		return nil, err
	}
	ids := s.tokensAfter(p)
	r := &store.TokenSweep{Read: len(ids)}
	if len(ids) == p.Limit {
		last := ids[len(ids)-1]
		r.Next = &store.TokenCursor{MintedAt: s.tokens[last], ID: last}
	}
	for _, id := range ids {
		if s.dead[store.TokenDedupID(id)] == nil {
			delete(s.tokens, id)
			r.Deleted++
		}
	}
	return r, nil
}

// tokensAfter returns the IDs of at most p.Limit tokens minted before
// p.MintedBefore and after p.After, in sweep order (MintedAt, then ID).
// The caller holds s.mu.
func (s *Store) tokensAfter(p *store.StaleTokens) []string {
	var ids []string
	for id, at := range s.tokens {
		if at.Before(p.MintedBefore) && (p.After == nil || cmp.Or(at.Compare(p.After.MintedAt), strings.Compare(id, p.After.ID)) > 0) {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b string) int {
		return cmp.Or(s.tokens[a].Compare(s.tokens[b]), strings.Compare(a, b))
	})
	return ids[:min(len(ids), p.Limit)]
}

package memstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idemhq/idem/internal/admit"
	"github.com/idemhq/idem/store"
)

var _ store.Limiter = (*Store)(nil)

// flow is the Store's flow-control state (see store.Limiter), guarded by
// Store.mu. Holds expire by the process's clock.
type flow struct {
	limits   map[string]store.Limit
	declared map[string]store.Limit
	holds    map[store.LimitKey]map[string]time.Time // holder → expires at
	buckets  map[store.LimitKey]*admit.Counter       // Tokens and RefilledAt only
	held     map[string][]store.LimitKey             // holder → the counters it holds
}

func (f *flow) init() {
	if f.limits == nil {
		f.limits = map[string]store.Limit{}
		f.declared = map[string]store.Limit{}
		f.holds = map[store.LimitKey]map[string]time.Time{}
		f.buckets = map[store.LimitKey]*admit.Counter{}
		f.held = map[string][]store.LimitKey{}
	}
}

// SetLimit creates or replaces the override of l.Name.
func (s *Store) SetLimit(ctx context.Context, l store.Limit) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("memstore: set limit: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "set limit"); err != nil {
		return err
	}
	s.flow.init()
	l.UpdatedAt = time.Now().UTC()
	s.flow.limits[l.Name] = l
	return nil
}

// ResetLimit removes the override of name; none is not an error.
func (s *Store) ResetLimit(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "reset limit"); err != nil {
		return err
	}
	delete(s.flow.limits, name)
	return nil
}

// Limits returns the overrides, ordered by name.
func (s *Store) Limits(ctx context.Context) ([]store.Limit, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "limits"); err != nil {
		return nil, err
	}
	return sortedLimits(s.flow.limits), nil
}

// DeclareLimits records the code's declarations; the last writer wins.
func (s *Store) DeclareLimits(ctx context.Context, ls []store.Limit) error {
	for _, l := range ls {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("memstore: declare limits: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "declare limits"); err != nil {
		return err
	}
	s.flow.init()
	now := time.Now().UTC()
	for _, l := range ls {
		l.UpdatedAt = now
		s.flow.declared[l.Name] = l
	}
	return nil
}

// DeclaredLimits returns the declarations, ordered by name.
func (s *Store) DeclaredLimits(ctx context.Context) ([]store.Limit, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "declared limits"); err != nil {
		return nil, err
	}
	return sortedLimits(s.flow.declared), nil
}

// ForgetDeclarations deletes the declarations made more than olderThan
// ago, by the process's clock.
func (s *Store) ForgetDeclarations(ctx context.Context, olderThan time.Duration) (int, error) {
	if err := store.ValidateForgetAge(olderThan); err != nil {
		return 0, fmt.Errorf("memstore: forget declarations: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "forget declarations"); err != nil {
		return 0, err
	}
	before, n := time.Now().Add(-olderThan), 0
	for name, l := range s.flow.declared {
		if l.UpdatedAt.Before(before) && !s.flow.hasCounter(name) {
			delete(s.flow.declared, name)
			n++
		}
	}
	return n, nil
}

// hasCounter reports whether a counter of the limit name is kept: a
// bucket, or a hold.
func (f *flow) hasCounter(name string) bool {
	for k := range f.buckets {
		if k.Name == name {
			return true
		}
	}
	for k := range f.holds {
		if k.Name == name {
			return true
		}
	}
	return false
}

// sortedLimits returns m's limits ordered by name.
func sortedLimits(m map[string]store.Limit) []store.Limit {
	out := make([]store.Limit, 0, len(m))
	for _, l := range m {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b store.Limit) int { return store.LimitKey{Name: a.Name}.Compare(store.LimitKey{Name: b.Name}) })
	return out
}

// LimitUses returns every counter with a live hold or a bucket.
func (s *Store) LimitUses(ctx context.Context) ([]store.LimitUse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "limit uses"); err != nil {
		return nil, err
	}
	now := time.Now()
	uses := map[store.LimitKey]*store.LimitUse{}
	use := func(k store.LimitKey) *store.LimitUse {
		if uses[k] == nil {
			uses[k] = &store.LimitUse{LimitKey: k}
		}
		return uses[k]
	}
	for k := range s.flow.holds {
		if n := s.flow.live(k, now); n > 0 {
			use(k).InFlight = n
		}
	}
	for k, b := range s.flow.buckets {
		u := use(k)
		u.Tokens = b.Tokens
		l, ok := s.flow.limits[k.Name]
		if !ok {
			l, ok = s.flow.declared[k.Name]
		}
		if ok && l.Rate > 0 {
			u.Tokens = admit.Refilled(l, b.Tokens, b.RefilledAt, now)
		}
	}
	out := make([]store.LimitUse, 0, len(uses))
	for _, u := range uses {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b store.LimitUse) int { return a.LimitKey.Compare(b.LimitKey) })
	return out, nil
}

// live drops the expired holds of k and counts the others.
func (f *flow) live(k store.LimitKey, now time.Time) int {
	for h, exp := range f.holds[k] {
		if !exp.After(now) {
			f.release1(h, k)
		}
	}
	return len(f.holds[k])
}

// Admit decides p's requests in order (see store.Limiter).
func (s *Store) Admit(ctx context.Context, p *store.AdmitParams) ([]store.Admission, error) {
	if p == nil {
		p = &store.AdmitParams{TTL: time.Second}
	}
	if err := admit.Validate(p.Requests); err != nil {
		return nil, fmt.Errorf("memstore: admit: %w", err)
	}
	if p.TTL <= 0 {
		return nil, errors.New("memstore: admit: AdmitParams.TTL must be positive")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "admit"); err != nil {
		return nil, err
	}
	s.flow.init()
	now := time.Now()
	cs := map[store.LimitKey]*admit.Counter{}
	for _, k := range admit.Keys(p.Limits, p.Requests) {
		c := &admit.Counter{Live: s.flow.live(k, now), Fresh: true}
		if b := s.flow.buckets[k]; b != nil {
			c.Tokens, c.RefilledAt, c.Fresh = b.Tokens, b.RefilledAt, false
		}
		cs[k] = c
	}
	adm, holds := admit.Decide(p.Limits, p.Requests, cs, now)
	for k, c := range cs {
		if c.Refilled {
			s.flow.buckets[k] = &admit.Counter{Tokens: c.Tokens, RefilledAt: c.RefilledAt}
		}
	}
	for i, ks := range holds {
		s.flow.hold(p.Requests[i].Holder, ks, now.Add(p.TTL))
	}
	return adm, nil
}

// hold gives holder a hold on each of ks until exp.
func (f *flow) hold(holder string, ks []store.LimitKey, exp time.Time) {
	for _, k := range ks {
		if f.holds[k] == nil {
			f.holds[k] = map[string]time.Time{}
		}
		f.holds[k][holder] = exp
		if !slices.Contains(f.held[holder], k) {
			f.held[holder] = append(f.held[holder], k)
		}
	}
}

// ExtendHolds makes the live holds of holders expire ttl from now.
func (s *Store) ExtendHolds(ctx context.Context, holders []string, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "extend holds"); err != nil {
		return err
	}
	now := time.Now()
	for _, h := range holders {
		for _, k := range s.flow.held[h] {
			if exp, ok := s.flow.holds[k][h]; ok && exp.After(now) {
				s.flow.holds[k][h] = now.Add(ttl)
			}
		}
	}
	return nil
}

// ReleaseHolds releases every hold of holders.
func (s *Store) ReleaseHolds(ctx context.Context, holders []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "release holds"); err != nil {
		return err
	}
	s.flow.release(holders)
	return nil
}

// release drops every hold of holders. The caller holds Store.mu.
func (f *flow) release(holders []string) {
	for _, h := range holders {
		for _, k := range f.held[h] {
			delete(f.holds[k], h)
			if len(f.holds[k]) == 0 {
				delete(f.holds, k)
			}
		}
		delete(f.held, h)
	}
}

// SweepCounters deletes up to p.Limit expired holds, and the buckets no
// decision needs among p.Limit read after p.After in (Name, Key) order
// (see store.Limiter).
func (s *Store) SweepCounters(ctx context.Context, p *store.CounterSweepParams) (*store.CounterSweep, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("memstore: sweep counters: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "sweep counters"); err != nil {
		return nil, err
	}
	s.flow.init()
	now := time.Now()
	out := &store.CounterSweep{Holds: s.flow.dropExpired(now, p.Limit)}
	keys := s.flow.bucketsAfter(p.After)
	if len(keys) >= p.Limit {
		keys = keys[:p.Limit]
		out.Next = &keys[len(keys)-1]
	}
	for _, k := range keys {
		b := s.flow.buckets[k]
		c := admit.Idle{Bucket: true, Tokens: b.Tokens, RefilledAt: b.RefilledAt, UsedAt: b.RefilledAt, Limit: s.flow.inForce(k.Name)}
		if s.flow.liveHolds(k, now) == 0 && admit.Sweepable(c, now, p.Idle) {
			delete(s.flow.buckets, k)
			out.Counters++
		}
	}
	return out, nil
}

// dropExpired deletes up to n expired holds and returns how many it
// deleted.
func (f *flow) dropExpired(now time.Time, n int) int {
	dropped := 0
	for k, hs := range f.holds {
		for h, exp := range hs {
			if dropped == n {
				return dropped
			}
			if !exp.After(now) {
				f.release1(h, k)
				dropped++
			}
		}
	}
	return dropped
}

// release1 drops holder's hold on k.
func (f *flow) release1(holder string, k store.LimitKey) {
	delete(f.holds[k], holder)
	if len(f.holds[k]) == 0 {
		delete(f.holds, k)
	}
	f.held[holder] = slices.DeleteFunc(f.held[holder], func(o store.LimitKey) bool { return o == k })
	if len(f.held[holder]) == 0 {
		delete(f.held, holder)
	}
}

// liveHolds counts k's live holds at now, deleting none.
func (f *flow) liveHolds(k store.LimitKey, now time.Time) int {
	n := 0
	for _, exp := range f.holds[k] {
		if exp.After(now) {
			n++
		}
	}
	return n
}

// bucketsAfter returns the keys of the buckets after after (all when
// nil), in (Name, Key) order.
func (f *flow) bucketsAfter(after *store.LimitKey) []store.LimitKey {
	var ks []store.LimitKey
	for k := range f.buckets {
		if after == nil || k.Compare(*after) > 0 {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, store.LimitKey.Compare)
	return ks
}

// inForce returns the limit name in force as the store knows it: the
// override, else the declaration; nil when neither.
func (f *flow) inForce(name string) *store.Limit {
	if l, ok := f.limits[name]; ok {
		return &l
	}
	if l, ok := f.declared[name]; ok {
		return &l
	}
	return nil
}

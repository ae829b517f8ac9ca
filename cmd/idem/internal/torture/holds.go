package torture

import (
	"context"
	"time"

	"github.com/idemhq/idem/store"
)

// Beside a broker the engine admits through the store's Limiter (the
// root package's gate.go and flow_broker.go): one Admit per decision,
// each request a delivery's holder with the counters it needs; holds are
// extended with the leases' renewals and released by the commit that
// settles the message (store.Changes.ReleaseHolds) or by ReleaseHolds.
// The faultStore passes the Limiter through and, in a limits run, writes
// each of those calls to the flow log, keyed by holder, for checkFlow
// (flowcheck.go says what it proves).

func (s *faultStore) limiter() store.Limiter { return s.Store.(store.Limiter) }

// Admit is the wrapped store's Admit, logged: admit-begin before the
// call, and admit-end after it with each request admitted that took a
// counter (all or none of its Keys: store.Limiter) and the holds' TTL.
// With BreakNoAdmission the store is asked for no counter (every request
// is admitted, and takes nothing), while the log names the counters the
// engine asked for: the caps and the rate are exceeded.
func (s *faultStore) Admit(ctx context.Context, p *store.AdmitParams) ([]store.Admission, error) {
	l := s.f.flow
	if l == nil || p == nil {
		return s.limiter().Admit(ctx, p)
	}
	asked := p
	if s.f.cfg.Break == BreakNoAdmission {
		wp := *p
		wp.Requests = make([]store.AdmitRequest, len(p.Requests))
		for i, r := range p.Requests {
			wp.Requests[i] = store.AdmitRequest{Holder: r.Holder}
		}
		p = &wp
	}
	r := l.open("admit-begin", nil, "")
	adm, err := s.limiter().Admit(ctx, p)
	l.admitted(r, asked, adm, err)
	return adm, err
}

// admitted notes the end of Admit r, which decided p's requests as adm.
func (l *flowLog) admitted(r int64, p *store.AdmitParams, adm []store.Admission, err error) {
	ev := &flowEvent{Ev: "admit-end", R: r, T: time.Now().UnixNano(), OK: err == nil, TTL: int64(p.TTL)}
	if err == nil {
		for i, a := range adm {
			if i < len(p.Requests) && a.Admitted && len(p.Requests[i].Keys) > 0 {
				req := p.Requests[i]
				ev.D = append(ev.D, flowDelive{Holder: req.Holder, Keys: uniqueKeys(req.Keys)})
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.write(ev)
}

// release notes that a release of holders (how: "commit" or "release")
// is about to be sent, and returns its number; 0 (nothing noted) when
// there are none, or no log.
func (l *flowLog) release(holders []string, how string) int64 {
	if l == nil || len(holders) == 0 {
		return 0
	}
	return l.open("release", holders, how)
}

// released notes the outcome of release r.
func (l *flowLog) released(r int64, err error) {
	if l == nil || r == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.write(&flowEvent{Ev: "released", R: r, T: time.Now().UnixNano(), OK: err == nil})
}

// ExtendHolds is the wrapped store's, noted first (extend) in a limits
// run.
func (s *faultStore) ExtendHolds(ctx context.Context, holders []string, ttl time.Duration) error {
	if l := s.f.flow; l != nil && len(holders) > 0 {
		l.mu.Lock()
		l.write(&flowEvent{Ev: "extend", T: time.Now().UnixNano(), Holders: holders, TTL: int64(ttl)})
		l.mu.Unlock()
	}
	return s.limiter().ExtendHolds(ctx, holders, ttl)
}

// ReleaseHolds is the wrapped store's, its sending and outcome noted in a
// limits run.
func (s *faultStore) ReleaseHolds(ctx context.Context, holders []string) error {
	r := s.f.flow.release(holders, "release")
	err := s.limiter().ReleaseHolds(ctx, holders)
	s.f.flow.released(r, err)
	return err
}

// SetLimit is the wrapped store's.
func (s *faultStore) SetLimit(ctx context.Context, l store.Limit) error {
	return s.limiter().SetLimit(ctx, l)
}

// ResetLimit is the wrapped store's.
func (s *faultStore) ResetLimit(ctx context.Context, name string) error {
	return s.limiter().ResetLimit(ctx, name)
}

// Limits is the wrapped store's.
func (s *faultStore) Limits(ctx context.Context) ([]store.Limit, error) {
	return s.limiter().Limits(ctx)
}

// DeclareLimits is the wrapped store's.
func (s *faultStore) DeclareLimits(ctx context.Context, ls []store.Limit) error {
	return s.limiter().DeclareLimits(ctx, ls)
}

// DeclaredLimits is the wrapped store's.
func (s *faultStore) DeclaredLimits(ctx context.Context) ([]store.Limit, error) {
	return s.limiter().DeclaredLimits(ctx)
}

// ForgetDeclarations is the wrapped store's.
func (s *faultStore) ForgetDeclarations(ctx context.Context, olderThan time.Duration) (int, error) {
	return s.limiter().ForgetDeclarations(ctx, olderThan)
}

// LimitUses is the wrapped store's.
func (s *faultStore) LimitUses(ctx context.Context) ([]store.LimitUse, error) {
	return s.limiter().LimitUses(ctx)
}

// SweepCounters is the wrapped store's.
func (s *faultStore) SweepCounters(ctx context.Context, p *store.CounterSweepParams) (*store.CounterSweep, error) {
	return s.limiter().SweepCounters(ctx, p)
}

var _ store.Limiter = (*faultStore)(nil)

package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/store"
)

// Flow-control limits (docs/architecture.md, "Flow control in the stores") as the API, the console and
// the metrics show them: each limit's declared values, its runtime
// override, the values in force, and its counters' use.

// LimitValues are a limit's values: a concurrency cap, a rate and a burst,
// each 0 for none of that kind (see store.Limit).
type LimitValues struct {
	// Concurrency is the most messages in flight at once per counter,
	// across replicas; 0: no cap.
	Concurrency int `json:"concurrency"`
	// Rate is the admissions per second per counter; 0: no rate limit.
	Rate float64 `json:"rate"`
	// Burst is the rate's bucket size (at least 1 with a rate).
	Burst int `json:"burst"`
	// UpdatedAt is when the values were recorded: for a declaration, the
	// last time a running engine declared it (each does so at least every
	// store.DeclarationRefresh); for an override, when it was set. Absent
	// on the values in force.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// Limit is a flow-control limit as GET /api/limits shows it: every name
// that an engine declared, an operator overrode, or a counter still
// holds.
type Limit struct {
	Name string `json:"name"`
	// Declared is what the code declares (idem.Config.Limits), as the
	// running engines record it; null when no engine declared the name,
	// or when the engines' sweeper forgot a declaration no running engine
	// refreshed.
	Declared *LimitValues `json:"declared"`
	// DeclarationStale is set when no running engine has declared the
	// limit for store.DeclarationStale: not since Declared.UpdatedAt (by
	// this process's clock). Its code was most likely removed, and the
	// engines' sweeper will forget the declaration.
	DeclarationStale bool `json:"declaration_stale,omitempty"`
	// Override is the runtime override (POST /api/limits/{name}, idem
	// limits set); null when there is none.
	Override *LimitValues `json:"override"`
	// InForce is what the engines admit under: the override when there
	// is one, else the declaration. Null when no engine declares the
	// name: an override then applies to nothing.
	InForce *LimitValues `json:"in_force"`
	// InFlight is the live holds over every counter of the limit.
	InFlight int `json:"in_flight"`
	// Waiting is the messages waiting for admission over every counter
	// of the limit (see LimitCounter.Waiting).
	Waiting int `json:"waiting"`
	// Counters are the limit's counters, the most in flight first (then
	// the most waiting, then by key), at most ?keys= of them;
	// CounterCount counts them all.
	Counters     []LimitCounter `json:"counters"`
	CounterCount int            `json:"counter_count"`
}

// LimitCounter is one counter of a limit: key "" for an unpartitioned
// limit, else the partition (a tenant, say).
type LimitCounter struct {
	Key string `json:"key"`
	// InFlight counts the live holds: admitted, not released, not expired.
	InFlight int `json:"in_flight"`
	// Tokens is what the counter's rate bucket holds (see
	// store.LimitUse.Tokens); 0 without a bucket.
	Tokens float64 `json:"tokens"`
	// Waiting counts the queue messages waiting for admission on this
	// counter, once an admitting receive has looked at them (see
	// store.LimitUse.Waiting); 0 beside a broker.
	Waiting int `json:"waiting"`
}

// LimitList is the answer of GET /api/limits, the limits by name.
type LimitList struct {
	Limits []Limit `json:"limits"`
	// Shares are the shares of a fair queue (Config.FairShare: the
	// idem-fairness-key header's values) with the most messages waiting,
	// when the store's queue can count them; SharesTotal counts every
	// share with a message waiting.
	Shares      []store.ShareWaiting `json:"shares,omitempty"`
	SharesTotal int                  `json:"shares_total,omitempty"`
}

// LimitChange is the body of POST /api/limits/{name}: the override to
// set, which replaces any override whole. A field left out takes the
// declared value (0 for a name no engine declares), as idem limits set
// does with a flag not given; 0 means none of that kind.
type LimitChange struct {
	Concurrency *int     `json:"concurrency"`
	Rate        *float64 `json:"rate"`
	Burst       *int     `json:"burst"`
}

// errNoLimits is the error of a store that is no store.Limiter.
var errNoLimits = errors.New("the store keeps no flow-control limits")

// errUnknownLimit is the error of a change to a name that no engine
// declares and no override holds.
var errUnknownLimit = errors.New("no such limit")

// limitState is one read of the store's limits.
type limitState struct {
	declared map[string]store.Limit
	override map[string]store.Limit
	uses     map[string][]store.LimitUse // by name, the most in flight first, then the most waiting
	now      time.Time                   // when it was read, for DeclarationStale
}

// readLimits reads the declarations, the overrides and the counters; the
// error wraps errNoLimits when the store keeps none.
func (c *capabilities) readLimits(ctx context.Context) (*limitState, error) {
	lim := c.limits
	if lim == nil {
		return nil, fmt.Errorf("read limits: %w", errNoLimits)
	}
	s := &limitState{declared: map[string]store.Limit{}, override: map[string]store.Limit{}, uses: map[string][]store.LimitUse{}, now: time.Now()}
	decl, err := lim.DeclaredLimits(ctx)
	if err != nil {
		return nil, fmt.Errorf("read declared limits: %w", err)
	}
	for _, l := range decl {
		s.declared[l.Name] = l
	}
	over, err := lim.Limits(ctx)
	if err != nil {
		return nil, fmt.Errorf("read limit overrides: %w", err)
	}
	for _, l := range over {
		s.override[l.Name] = l
	}
	uses, err := lim.LimitUses(ctx)
	if err != nil {
		return nil, fmt.Errorf("read limit uses: %w", err)
	}
	for _, u := range uses {
		s.uses[u.Name] = append(s.uses[u.Name], u)
	}
	for _, us := range s.uses {
		slices.SortStableFunc(us, func(a, b store.LimitUse) int {
			return cmp.Or(cmp.Compare(b.InFlight, a.InFlight), cmp.Compare(b.Waiting, a.Waiting), strings.Compare(a.Key, b.Key))
		})
	}
	return s, nil
}

// names returns every name the state knows, sorted.
func (s *limitState) names() []string {
	all := maps.Clone(s.declared)
	for n, l := range s.override {
		all[n] = l
	}
	for n := range s.uses {
		all[n] = store.Limit{}
	}
	return slices.Sorted(maps.Keys(all))
}

// known reports whether name is declared or overridden.
func (s *limitState) known(name string) bool {
	_, d := s.declared[name]
	_, o := s.override[name]
	return d || o
}

// inForce returns the values in force of name; false when none are (no
// engine declares it).
func (s *limitState) inForce(name string) (store.Limit, bool) {
	d, declared := s.declared[name]
	o, overridden := s.override[name]
	switch {
	case overridden && declared:
		return o, true
	case declared:
		return d, true
	}
	return store.Limit{}, false
}

func values(l store.Limit, at bool) *LimitValues {
	v := &LimitValues{Concurrency: l.Concurrency, Rate: l.Rate, Burst: l.Burst}
	if at {
		v.UpdatedAt = l.UpdatedAt.UTC()
	}
	return v
}

// limit is name's view, with at most keys counters.
func (s *limitState) limit(name string, keys int) Limit {
	out := Limit{Name: name, Counters: []LimitCounter{}}
	if d, ok := s.declared[name]; ok {
		out.Declared = values(d, true)
		out.DeclarationStale = store.DeclarationIsStale(d.UpdatedAt, s.now)
	}
	if o, ok := s.override[name]; ok {
		out.Override = values(o, true)
	}
	if f, ok := s.inForce(name); ok {
		out.InForce = values(f, false)
	}
	us := s.uses[name]
	out.CounterCount = len(us)
	for i, u := range us {
		out.InFlight += u.InFlight
		out.Waiting += u.Waiting
		if i < keys {
			out.Counters = append(out.Counters, LimitCounter{Key: u.Key, InFlight: u.InFlight, Tokens: u.Tokens, Waiting: u.Waiting})
		}
	}
	return out
}

// list is every limit, by name, with at most keys counters each.
func (s *limitState) list(keys int) *LimitList {
	out := &LimitList{Limits: []Limit{}}
	for _, n := range s.names() {
		out.Limits = append(out.Limits, s.limit(n, keys))
	}
	return out
}

// listLimits reads every limit, with at most keys counters each, for GET
// /api/limits and the console; the error wraps errNoLimits when the store
// keeps none.
func (p *parts) listLimits(ctx context.Context, keys int) (*LimitList, error) {
	s, err := p.caps.readLimits(ctx)
	if err != nil {
		return nil, err
	}
	list := s.list(keys)
	if r := p.caps.shares; r != nil {
		if list.Shares, list.SharesTotal, err = r.WaitingShares(ctx, keys); err != nil {
			return nil, fmt.Errorf("read the waiting shares: %w", err)
		}
	}
	return list, nil
}

// limitChange is a change of one limit's override, for the API and the
// console: set (with the change's values) or reset.
type limitChange struct {
	name  string
	reset bool
	set   LimitChange
	// undeclared allows setting a name no engine declares (yet).
	undeclared bool
	actor      string
}

// changeLimit sets or resets the override of c.name and returns the
// limit as it is then, with at most keys counters. The error wraps
// errNoLimits, errUnknownLimit (a name neither declared nor overridden,
// unless c.undeclared allows it), or store.ErrRejected (a bad name or
// value, naming the field).
func (p *parts) changeLimit(ctx context.Context, c *limitChange, keys int) (*Limit, error) {
	if err := store.ValidateLimitText("Name", c.name); err != nil {
		return nil, err
	}
	s, err := p.caps.readLimits(ctx)
	if err != nil {
		return nil, err
	}
	if !s.known(c.name) && (c.reset || !c.undeclared) {
		return nil, fmt.Errorf("change limit %q: %w", c.name, errUnknownLimit)
	}
	verb := "reset"
	if c.reset {
		err = p.caps.limits.ResetLimit(ctx, c.name)
	} else {
		verb = "set"
		l := merged(c.name, s.declared[c.name], &c.set)
		if err = l.Validate(); err != nil {
			return nil, err
		}
		err = p.caps.limits.SetLimit(ctx, l)
	}
	if err != nil {
		return nil, fmt.Errorf("%s limit %q: %w", verb, c.name, err)
	}
	p.log.InfoContext(ctx, "admin: limit "+verb, "limit", c.name, "actor", c.actor, "set", c.set.String())
	if s, err = p.caps.readLimits(ctx); err != nil {
		return nil, err
	}
	l := s.limit(c.name, keys)
	return &l, nil
}

// merged is the override ch makes of limit name: in (the declared
// values) changed by ch.
func merged(name string, in store.Limit, ch *LimitChange) store.Limit {
	out := store.Limit{Name: name, Concurrency: in.Concurrency, Rate: in.Rate, Burst: in.Burst}
	if ch.Concurrency != nil {
		out.Concurrency = *ch.Concurrency
	}
	if ch.Rate != nil {
		out.Rate = *ch.Rate
	}
	if ch.Burst != nil {
		out.Burst = *ch.Burst
	}
	return out
}

// String is the change as a log line shows it: the fields given.
func (c *LimitChange) String() string {
	var parts []string
	if c.Concurrency != nil {
		parts = append(parts, fmt.Sprintf("concurrency=%d", *c.Concurrency))
	}
	if c.Rate != nil {
		parts = append(parts, fmt.Sprintf("rate=%g", *c.Rate))
	}
	if c.Burst != nil {
		parts = append(parts, fmt.Sprintf("burst=%d", *c.Burst))
	}
	return strings.Join(parts, " ")
}

// limitField is the JSON name of the field a store.RejectedError names.
func limitField(err error) string {
	var rej *store.RejectedError
	if errors.As(err, &rej) {
		return strings.ToLower(rej.Field)
	}
	return ""
}

// limitMetricKeys is how many counters of each limit /metrics exports on
// their own, the most in flight first; the rest are summed under
// key="other", and so is a counter whose key is "other".
const limitMetricKeys = 100

// otherKey is the key label of the counters summed together.
const otherKey = "other"

// collectLimits exports idem_limit_in_flight, idem_limit_tokens and
// idem_limit_waiting per counter (at most limitMetricKeys a limit) and idem_limit_concurrency per
// limit, when the store keeps limits. It reports false when the store did
// not answer.
func (c *collector) collectLimits(ctx context.Context, ch chan<- prometheus.Metric) bool {
	if c.caps.limits == nil {
		return true
	}
	s, err := c.caps.readLimits(ctx)
	if err != nil {
		c.log.Warn("metrics: read the limits", "error", err)
		return false
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labels...)
		if err != nil {
			c.log.Warn("metrics: a limit has a label Prometheus refuses", "error", err)
			return
		}
		ch <- m
	}
	for _, name := range s.names() {
		f, _ := s.inForce(name)
		gauge(c.limitConcurrency, float64(f.Concurrency), name)
		var other store.LimitUse
		shown, folded := 0, 0
		for _, u := range s.uses[name] {
			if shown < limitMetricKeys && u.Key != otherKey {
				shown++
				gauge(c.limitInFlight, float64(u.InFlight), name, u.Key)
				gauge(c.limitTokens, u.Tokens, name, u.Key)
				gauge(c.limitWaiting, float64(u.Waiting), name, u.Key)
				continue
			}
			folded++
			other.InFlight += u.InFlight
			other.Tokens += u.Tokens
			other.Waiting += u.Waiting
		}
		if folded > 0 {
			gauge(c.limitInFlight, float64(other.InFlight), name, otherKey)
			gauge(c.limitTokens, other.Tokens, name, otherKey)
			gauge(c.limitWaiting, float64(other.Waiting), name, otherKey)
		}
	}
	return true
}

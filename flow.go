package idem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Limit declares a flow-control limit (docs/flow-control.md). The engine
// admits a message only while every limit it falls under admits it, in
// the transaction that leases the message (beside a broker, through the
// store after it receives the message); a message it does not admit yet
// stays in the queue (beside a broker, waits in the engine, leased), its
// attempt not counted, and so do the later messages of its saga key.
// Holds are released in the transaction that settles the message
// (applied, dead-lettered or given back), and expire with its lease when
// its replica dies.
type Limit struct {
	// Name names the limit, and the resource it protects when several
	// message types share it ("parser-api"): non-empty, valid UTF-8
	// without U+0000, at most store.MaxLimitName bytes. Runtime changes
	// (idem limits set) address it by name.
	Name string
	// SagaType, when set, limits the messages of this registered saga
	// type only.
	SagaType string
	// MessageTypes, when set, limits the messages of these registered
	// types only. With neither SagaType nor MessageTypes, the limit
	// applies to every message the engine consumes.
	MessageTypes []string
	// Key, when set, partitions the limit: one counter per value (a
	// tenant from a header, say), each with the limit's values. A value
	// that is not valid text for a store (invalid UTF-8, U+0000, over
	// store.MaxLimitName bytes) is replaced by a digest of it. Nil: one
	// counter for the whole limit.
	Key func(*Envelope) string
	// Concurrency is how many messages under one counter may be in
	// flight at once (admitted and not settled), across replicas; 0: no
	// cap.
	Concurrency int
	// Rate is how many messages per second one counter admits, across
	// replicas (a token bucket of Burst tokens, full at first); 0: no
	// rate limit.
	Rate float64
	// Burst is the bucket's size; below 1 with a Rate, 1.
	Burst int
}

// values is the limit's values as a store keeps them.
func (l *Limit) values() store.Limit {
	return store.Limit{Name: l.Name, Concurrency: l.Concurrency, Rate: l.Rate, Burst: l.Burst}
}

// admission is the engine's flow control: the declared limits, the
// counters each message needs, and the values in force (the
// declarations, overridden by the store's limits, refreshed by the
// limitsPoller service). The source receives through it
// (store.AdmittingQueue.ReceiveAdmitted; beside a broker, a gate:
// gate.go).
type admission struct {
	log    *slog.Logger
	q      store.AdmittingQueue // nil: admission beside a broker (broker)
	lim    store.Limiter        // the store's limits (q, or the store beside the broker)
	broker *brokerFlow          // nil: the store's own queue admits
	fair   bool                 // Config.FairShare
	byType map[string][]*Limit  // the limits of each message type
	all    []*Limit             // the limits of every message
	// covering are the limits without Key that every message type the
	// engine consumes falls under (store.ReceiveParams.Covering).
	covering []string
	decl     map[string]store.Limit
	inForce  atomic.Pointer[map[string]store.Limit]
	// declared is set once refresh has recorded decl in the store (at
	// Start, before the limitsPoller runs); the limitsDeclarer records it
	// again while the engine runs.
	declared bool
	mu       sync.Mutex
	changed  chan struct{} // closed when the values in force change
}

// newAdmission checks the declared limits against the registry and the
// store, and returns the engine's admission; nil when none is declared.
func newAdmission(b *base, reg *registry) (*admission, error) {
	if len(b.cfg.Limits) == 0 && !b.cfg.FairShare {
		return nil, nil
	}
	if _, ok := b.store.(store.AdmittingQueue); b.cfg.FairShare && (!ok || !b.caps.queue) {
		return nil, fmt.Errorf("idem: start: Config.FairShare needs the store's own queue as transport (pgstore or sqlitestore as both store and transport); %T as store with %T as transport keeps the transport's order: remove Config.FairShare, or use the store's queue", b.store, b.tr)
	}
	a := &admission{log: b.log, fair: b.cfg.FairShare, byType: map[string][]*Limit{}, decl: map[string]store.Limit{}, changed: make(chan struct{})}
	if err := a.admitWhere(b); err != nil {
		return nil, err
	}
	for i := range b.cfg.Limits {
		l := &b.cfg.Limits[i]
		if err := a.declare(l, reg); err != nil {
			return nil, fmt.Errorf("idem: start: Config.Limits[%d]: %w", i, err)
		}
	}
	a.covering = a.coveringLimits(reg)
	decl := maps.Clone(a.decl)
	a.inForce.Store(&decl)
	return a, nil
}

// coveringLimits returns the names of the limits without Key that every
// message type reg consumes falls under: while one of their counters is
// full, no message the engine consumes can be admitted.
func (a *admission) coveringLimits(reg *registry) []string {
	var out []string
	for _, l := range a.decl {
		if a.covers(l.Name, reg) {
			out = append(out, l.Name)
		}
	}
	slices.Sort(out)
	return out
}

// covers reports whether the limit name has no Key and applies to every
// message type reg consumes.
func (a *admission) covers(name string, reg *registry) bool {
	has := func(ls []*Limit) bool {
		return slices.ContainsFunc(ls, func(l *Limit) bool { return l.Name == name && l.Key == nil })
	}
	if has(a.all) {
		return true
	}
	types := slices.Concat(slices.Collect(maps.Keys(reg.machines)), slices.Collect(maps.Keys(reg.handlers)))
	return len(types) > 0 && !slices.ContainsFunc(types, func(t string) bool { return !has(a.byType[t]) })
}

// declare checks one declared limit and files it by the message types it
// applies to.
func (a *admission) declare(l *Limit, reg *registry) error {
	v := l.values()
	if err := v.Validate(); err != nil {
		return err
	}
	if _, dup := a.decl[l.Name]; dup {
		return fmt.Errorf("limit %q is declared twice: give each limit its own name", l.Name)
	}
	a.decl[l.Name] = v
	var types []string
	if l.SagaType != "" {
		m, ok := reg.sagas[l.SagaType]
		if !ok {
			return fmt.Errorf("limit %q: SagaType %q is not a registered saga type (registered: %s)", l.Name, l.SagaType, strings.Join(slices.Sorted(maps.Keys(reg.sagas)), ", "))
		}
		types = m.MessageTypes()
	}
	if len(l.MessageTypes) > 0 {
		var kept []string
		for _, t := range l.MessageTypes {
			if reg.machines[t] == nil && reg.handlers[t] == nil {
				return fmt.Errorf("limit %q: message type %q is consumed by no registered saga or handler", l.Name, t)
			}
			if l.SagaType == "" || slices.Contains(types, t) {
				kept = append(kept, t)
			}
		}
		if len(kept) == 0 {
			return fmt.Errorf("limit %q: none of MessageTypes is a message of saga type %q", l.Name, l.SagaType)
		}
		types = kept
	}
	if types == nil {
		a.all = append(a.all, l)
		return nil
	}
	for _, t := range types {
		a.byType[t] = append(a.byType[t], l)
	}
	return nil
}

// needs returns the counters env needs (nil: none). The store calls it
// inside its receive's transaction.
func (a *admission) needs(env *transport.Envelope) []store.LimitKey {
	ls := a.byType[env.Type]
	if len(ls) == 0 && len(a.all) == 0 {
		return nil
	}
	out := make([]store.LimitKey, 0, len(ls)+len(a.all))
	for _, set := range [][]*Limit{ls, a.all} {
		for _, l := range set {
			k := store.LimitKey{Name: l.Name}
			if l.Key != nil {
				k.Key = a.key(l, env)
			}
			out = append(out, k)
		}
	}
	return out
}

// key runs l.Key on env, inside the store's transaction: a Key that
// panics must not fail every receive while its message waits at the head
// of the queue, so the message counts under the key keyPanicked, and the
// panic is logged.
func (a *admission) key(l *Limit, env *transport.Envelope) (k string) {
	defer func() {
		if p := recover(); p != nil {
			a.log.Error("a flow-control limit's Key panicked; the message counts under the key "+keyPanicked, "limit", l.Name, logMessageID, env.ID, "panic", fmt.Sprint(p))
			k = keyPanicked
		}
	}()
	return limitKey(l.Key(env))
}

// keyPanicked is the counter key of a message whose Limit.Key panicked.
const keyPanicked = "idem:key-panicked"

// limitKey makes a counter's key of a value computed from an envelope:
// the value itself when a store keeps it as is, else a digest of it.
func limitKey(v string) string {
	if store.ValidateLimitText("Key", v) == nil {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// receive is the source's receive through admission: the store's
// ReceivePartition that admits as it leases; beside a broker, next (the
// transport's receive) through a gate that admits through the store
// (gate.go). A receive decides under the limits in force when it began,
// and may wait long for a slot: when a refresh changes the values in
// force, its wait ends empty (ReceiveParams.Changed), and the next
// receive decides under the new values.
func (a *admission) receive(next func(context.Context, int) ([]transport.Delivery, error), part, parts int) func(context.Context, int) ([]transport.Delivery, error) {
	if a.q == nil {
		return a.broker.gate(a, next, part, parts).receive
	}
	return func(ctx context.Context, max int) ([]transport.Delivery, error) {
		a.mu.Lock()
		limits, changed := *a.inForce.Load(), a.changed
		a.mu.Unlock()
		return a.q.ReceiveAdmitted(ctx, &store.ReceiveParams{Max: max, Part: part, Parts: parts, Limits: limits, Needs: a.needs, Covering: a.covering, Fair: a.fair, Changed: changed})
	}
}

// refresh reads the store's overrides and puts the limits in force: each
// declared limit's values, or its override's. An override of a name no
// limit declares applies to nothing. Its first run records the
// declarations in the store (record) for the operator's tools.
func (a *admission) refresh(ctx context.Context) error {
	if !a.declared {
		if err := a.record(ctx); err != nil {
			return err
		}
		a.declared = true
	}
	over, err := a.lim.Limits(ctx)
	if err != nil {
		return err
	}
	in := maps.Clone(a.decl)
	for _, o := range over {
		if _, ok := in[o.Name]; !ok {
			continue
		}
		if err := o.Validate(); err != nil {
			// A row written around the store's checks: keep the declared
			// values rather than lift the limit.
			a.log.Error("a limit's runtime values are invalid; its declared values stay in force", "limit", o.Name, "error", err)
			continue
		}
		in[o.Name] = o
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if maps.EqualFunc(*a.inForce.Load(), in, sameValues) {
		return nil
	}
	a.inForce.Store(&in)
	close(a.changed) // the receives waiting under the old values end
	a.changed = make(chan struct{})
	return nil
}

// record records the declarations in the store
// (store.Limiter.DeclareLimits), in one call, setting their UpdatedAt.
func (a *admission) record(ctx context.Context) error {
	if err := a.lim.DeclareLimits(ctx, slices.Collect(maps.Values(a.decl))); err != nil {
		return fmt.Errorf("record Config.Limits in the store: %w", err)
	}
	return nil
}

// sameValues reports whether two limits admit alike.
func sameValues(x, y store.Limit) bool {
	return x.Concurrency == y.Concurrency && x.Rate == y.Rate && x.Burst == y.Burst
}

// limitsPoller is the service that refreshes the limits in force every
// Config.LimitsInterval, so that a change (idem limits set) reaches every
// replica within one interval.
type limitsPoller struct {
	*base
	adm   *admission
	fails *failures
}

func (p *limitsPoller) run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.LimitsInterval)
	defer t.Stop()
	for {
		err := p.adm.refresh(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && errors.Is(err, context.Canceled):
		default:
			p.fails.report(ctx, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func newLimitsPoller(b *base, adm *admission) *limitsPoller {
	return &limitsPoller{base: b, adm: adm, fails: newFailures(b, slog.LevelWarn, "reading the limits' runtime values failed; the last ones read stay in force")}
}

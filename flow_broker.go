package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Admission beside a broker (docs/flow-control.md, "Beside a broker"):
// when the transport is not the store's own queue, the engine receives
// from the broker as it does without limits, then admits through the
// store (store.Limiter.Admit) in a gate (gate.go) that the source's
// receive goes through. An admitted delivery holds its counters under a
// holder of its own (holds, below) until the unit of work that settles it
// commits (store.Changes.ReleaseHolds), or until the batch it ran in ends
// (store.Limiter.ReleaseHolds, for the paths that settle outside a unit
// of work); its holds expire with a TTL of one lease and are extended
// with the lease's renewals. A refused delivery waits in the gate, its
// lease renewed by brokerFlow, so that waiting never counts an attempt.

// admitWhere decides where the engine admits: inside the receive of the
// store's own queue (store.AdmittingQueue), or beside a broker, through
// the store, after each receive.
func (a *admission) admitWhere(b *base) error {
	q, queue := b.store.(store.AdmittingQueue)
	lim, limiter := b.store.(store.Limiter)
	switch {
	case queue && b.caps.queue:
		a.q, a.lim = q, q
		return nil
	case b.caps.queue || !limiter:
		return fmt.Errorf("idem: start: Config.Limits needs a store that keeps limits and admits (pgstore or sqlitestore, as store and transport or beside a broker); %T as store with %T as transport has no admission: remove Config.Limits, or use one of those stores", b.store, b.tr)
	case b.caps.leases == nil:
		return fmt.Errorf("idem: start: Config.Limits beside transport %T needs leases the engine can extend (transport.LeaseExtender), so that a message waiting for admission keeps its lease without counting an attempt: remove Config.Limits, or use a transport that extends leases (natsjs, rabbitmq, redisstreams)", b.tr)
	}
	a.lim, a.broker = lim, newBrokerFlow(b, lim)
	return nil
}

// besideBroker wires admission beside a broker into the units (the
// holds their commits release) and the leases (whose renewals extend the
// holds), and returns the service that keeps the waiting deliveries'
// leases; nil when the store's own queue admits, or with no admission.
func (a *admission) besideBroker(u *units) []service {
	if a == nil || a.broker == nil {
		return nil
	}
	u.holds = a.broker.holds
	u.caps.leases.holds = a.broker.holds.extend
	return []service{a.broker}
}

// brokerFlow is admission beside a broker: the holds of this process's
// admitted deliveries, and the gates of its consumers. As a service it
// renews the leases of the deliveries waiting in the gates, every third
// of a lease, and gives them back to the broker when the engine stops.
type brokerFlow struct {
	*base
	lim   store.Limiter
	holds *holds
	fails *failures
	mu    sync.Mutex
	gates map[[2]int]*gate // by partition and partitions
}

func newBrokerFlow(b *base, lim store.Limiter) *brokerFlow {
	return &brokerFlow{
		base: b, lim: lim, holds: newHolds(lim, b.caps.leases.ext.LeaseDuration(), b.log),
		fails: newFailures(b, slog.LevelWarn, "extending the leases of deliveries waiting for admission failed; they may be handed out again"),
		gates: map[[2]int]*gate{},
	}
}

// gate returns the gate of partition part of parts, made on first use:
// consumers that share one stream share its gate, so that the waiting
// deliveries of a key are seen by every consumer that may receive the
// later ones.
func (f *brokerFlow) gate(adm *admission, next func(context.Context, int) ([]transport.Delivery, error), part, parts int) *gate {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := [2]int{part, parts}
	if g := f.gates[k]; g != nil {
		return g
	}
	g := &gate{f: f, adm: adm, next: next}
	f.gates[k] = g
	return g
}

func (f *brokerFlow) allGates() []*gate {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*gate, 0, len(f.gates))
	for _, g := range f.gates {
		out = append(out, g)
	}
	return out
}

// run renews the waiting deliveries' leases until ctx ends, then gives
// them back, once the gates' receives from the broker have ended.
func (f *brokerFlow) run(ctx context.Context) error {
	every := f.caps.leases.every
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			for _, g := range f.allGates() {
				g.close(ctx)
			}
			return nil
		case <-t.C:
			for _, g := range f.allGates() {
				f.fails.report(ctx, g.renew(ctx, every))
			}
		}
	}
}

// holds are the holds of this process's admitted deliveries beside a
// broker: each delivery's holder (unique per delivery), from its
// admission until the commit or the call that releases it. A nil *holds
// does nothing (no admission beside a broker).
type holds struct {
	lim    store.Limiter
	ttl    time.Duration // a lease
	log    *slog.Logger
	prefix string // this process's, so that holders never collide across replicas
	seq    atomic.Uint64
	mu     sync.Mutex
	by     map[string]string // holder by delivery token
	wake   chan struct{}     // closed when a hold is released in this process
}

func newHolds(lim store.Limiter, ttl time.Duration, log *slog.Logger) *holds {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &holds{lim: lim, ttl: ttl, log: log, prefix: "idem:" + hex.EncodeToString(b[:]) + ":", by: map[string]string{}, wake: make(chan struct{})}
}

// holder returns a new holder, for one delivery.
func (h *holds) holder() string { return h.prefix + strconv.FormatUint(h.seq.Add(1), 36) }

// woken returns a channel closed at the next release in this process.
func (h *holds) woken() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.wake
}

// admitted records the holds of the admitted waiters.
func (h *holds) admitted(ws []*waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range ws {
		if w.holder != "" {
			h.by[w.d.Token] = w.holder
		}
	}
}

// holders returns the holders of the deliveries token gives, forgetting
// them when forget is set (the caller wakes the waiting receives once
// the store released them).
func (h *holds) holders(n int, token func(int) string, forget bool) []string {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for i := range n {
		tok := token(i)
		if hd, ok := h.by[tok]; ok {
			out = append(out, hd)
			if forget {
				delete(h.by, tok)
			}
		}
	}
	return out
}

// wakeAll wakes the waiting receives: holds were released.
func (h *holds) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.wake)
	h.wake = make(chan struct{})
}

// of returns the holders of items, for the commit that settles them
// (store.Changes.ReleaseHolds).
func (h *holds) of(items []*item) []string {
	return h.holders(len(items), func(i int) string { return items[i].d.Token }, false)
}

// released forgets the holds of items, released by their commit.
func (h *holds) released(items []*item) {
	if len(h.holders(len(items), func(i int) string { return items[i].d.Token }, true)) > 0 {
		h.wakeAll()
	}
}

// settle releases the holds of ds that no commit released (a batch that
// ended with a Nack after a failed unit of work, a lost lease, a stop):
// a batch's deliveries are settled, or left to the broker, when it ends.
func (h *holds) settle(ctx context.Context, ds []transport.Delivery) {
	hs := h.holders(len(ds), func(i int) string { return ds[i].Token }, true)
	if len(hs) > 0 {
		h.release(ctx, hs)
		h.wakeAll() // after the store released them, or the receive woken would find them held
	}
}

// release releases hs through the store; when that fails, they expire
// within a lease.
func (h *holds) release(ctx context.Context, hs []string) {
	if len(hs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.ttl)
	defer cancel()
	if err := h.lim.ReleaseHolds(ctx, hs); err != nil {
		h.log.WarnContext(ctx, "releasing flow-control holds failed; they expire within a lease", "holds", len(hs), "lease", h.ttl.String(), "error", err)
	}
}

// extend extends the holds of ds by a lease, with their leases'
// renewal (lease.go).
func (h *holds) extend(ctx context.Context, ds []transport.Delivery) error {
	hs := h.holders(len(ds), func(i int) string { return ds[i].Token }, false)
	if len(hs) == 0 {
		return nil
	}
	if err := h.lim.ExtendHolds(ctx, hs, h.ttl); err != nil {
		return fmt.Errorf("extend %d flow-control holds: %w", len(hs), err)
	}
	return nil
}

// lostLeases returns the deliveries of ds whose leases ext reports lost,
// one extension each, after an extension of them all failed with
// transport.ErrLeaseLost.
func lostLeases(ctx context.Context, ext transport.LeaseExtender, ds []transport.Delivery) map[string]bool {
	lost := map[string]bool{}
	for _, d := range ds {
		if err := ext.ExtendLeases(ctx, []transport.Delivery{d}); errors.Is(err, transport.ErrLeaseLost) {
			lost[d.Token] = true
		}
	}
	return lost
}

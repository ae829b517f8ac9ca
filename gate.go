package idem

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// gate is the part a source's receive goes through beside a broker
// (flow_broker.go): it receives from the broker, admits through the
// store, and hands out the deliveries admitted. The others wait in the
// gate, in the order received, their leases renewed (brokerFlow), and
// are decided again when a hold is released in this process, when a
// rate's next token is due, when the limits in force change, or every
// Config.LimitsInterval (for the releases of other replicas). A later
// delivery of a waiting one's partition key (transport.PartitionKey)
// waits behind it, whatever it needs, so a limit never lets a later
// message of a key overtake an earlier one. The waiting set is bounded
// (waitingBatches receives): when it is full, the gate stops receiving.
type gate struct {
	f    *brokerFlow
	adm  *admission
	next func(context.Context, int) ([]transport.Delivery, error)
	turn sync.Mutex // one receive at a time
	// fetch, under turn, reports the end of the broker's receive in
	// flight (nil: none); fetching counts them, for Stop.
	fetch    chan error
	fetching sync.WaitGroup
	mu       sync.Mutex // guards waiting and closed
	// waiting are the deliveries not handed out yet, in the order
	// received.
	waiting []*waiter
	closed  bool // the engine stopped: deliveries go back to the broker
}

// waitingBatches bounds the waiting set, in receives of the consumer's
// batch size: the window the store's own admitting receive looks at.
const waitingBatches = 4

// waiter is a delivery in the gate.
type waiter struct {
	d      transport.Delivery
	key    string           // its partition key
	needs  []store.LimitKey // the counters it needs; none: it waits only for its key
	holder string           // its holds' holder, when it needs any
	// lost, when set, is when its lease was lost: it stays as a
	// placeholder that blocks its key until the broker's redelivery of
	// its message takes its place (add), or for two leases (renew).
	lost atomic.Int64 // unix nanoseconds; 0: not lost
}

// receive returns deliveries admitted, at most max: those waiting first,
// then received from the broker while the waiting set has room. It
// blocks until it has some, ctx ends, or the broker's receive fails.
func (g *gate) receive(ctx context.Context, n int) ([]transport.Delivery, error) {
	g.turn.Lock()
	defer g.turn.Unlock()
	max := max(n, 1)
	for {
		sig := g.signals()
		ready, wait, err := g.admit(ctx, max)
		if len(ready) > 0 || err != nil || ctx.Err() != nil {
			return ready, err
		}
		room := waitingBatches*max - g.count()
		if room <= 0 {
			if !sig.wait(ctx, wait) {
				return nil, ctx.Err()
			}
			continue
		}
		if err := g.receiveNext(ctx, min(room, max), sig, wait); err != nil {
			return nil, err
		}
	}
}

// receiveNext receives from the broker into the waiting set, and returns
// when that receive ended (with its error), or, while deliveries wait,
// at a signal, so that they are decided again at once. A signal never
// cancels the broker's receive, which may have taken deliveries already
// (a cancelled receive can strand them until their lease runs out, and
// cost an attempt): it goes on in the background, one at a time per
// gate, and adds what it receives to the waiting set, where their leases
// are kept.
func (g *gate) receiveNext(ctx context.Context, max int, sig signals, wait time.Duration) error {
	if g.fetch == nil {
		g.mu.Lock()
		closed := g.closed
		if !closed {
			g.fetching.Add(1) // under mu: never after close's Wait began
		}
		g.mu.Unlock()
		if closed {
			return fmt.Errorf("receive: the engine is stopping: %w", context.Canceled)
		}
		done := make(chan error, 1)
		g.fetch = done
		go func() {
			defer g.fetching.Done()
			ds, err := g.next(ctx, max)
			g.add(ctx, ds)
			if len(ds) > 0 {
				err = nil
			}
			done <- err
		}()
	}
	if g.count() == 0 {
		err := <-g.fetch
		g.fetch = nil
		return err
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	select {
	case err := <-g.fetch:
		g.fetch = nil
		return err
	case <-sig.after(actx, wait):
		return nil
	}
}

// signals are what ends a wait for admission.
type signals struct {
	released <-chan struct{} // a hold released in this process
	changed  <-chan struct{} // the limits in force changed
	poll     time.Duration   // other replicas' releases
}

func (g *gate) signals() signals {
	g.adm.mu.Lock()
	changed := g.adm.changed
	g.adm.mu.Unlock()
	return signals{released: g.f.holds.woken(), changed: changed, poll: g.f.cfg.LimitsInterval}
}

// wait waits for a signal, or for wait (a rate's next token) when it is
// shorter than the poll interval; false when ctx ended first.
func (s signals) wait(ctx context.Context, wait time.Duration) bool {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	<-s.after(actx, wait)
	return ctx.Err() == nil
}

// after returns a channel closed at a signal, at wait (a rate's next
// token) when it is shorter than the poll interval, or when ctx ends
// (which the caller cancels once it no longer waits).
func (s signals) after(ctx context.Context, wait time.Duration) <-chan struct{} {
	d := s.poll
	if wait > 0 && wait < d {
		d = wait
	}
	out := make(chan struct{})
	go func() {
		defer close(out)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-s.released:
		case <-s.changed:
		case <-t.C:
		}
	}()
	return out
}

func (g *gate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting)
}

// add puts ds in the waiting set, in order; after the engine stopped, it
// gives them back at once.
func (g *gate) add(ctx context.Context, ds []transport.Delivery) {
	if len(ds) == 0 {
		return
	}
	ws := make([]*waiter, len(ds))
	for i, d := range ds {
		w := &waiter{d: d, key: transport.PartitionKey(&d.Envelope), needs: g.adm.needs(&d.Envelope)}
		if len(w.needs) > 0 {
			w.holder = g.f.holds.holder()
		}
		ws[i] = w
	}
	g.mu.Lock()
	closed := g.closed
	if !closed {
		for _, w := range ws {
			i := slices.IndexFunc(g.waiting, func(o *waiter) bool { return o.lost.Load() != 0 && o.d.Envelope.ID == w.d.Envelope.ID })
			if i >= 0 {
				g.waiting[i] = w // the redelivery takes the lost one's place
			} else {
				g.waiting = append(g.waiting, w)
			}
		}
	}
	g.mu.Unlock()
	if closed {
		g.giveBack(ctx, ws)
	}
}

// admit decides the waiting deliveries, in order, until max are
// admitted or every one was decided: one Admit for at most max of them
// at a time (admissionPlan), so that a refused head does not hide the
// deliveries behind it. It takes those admitted out of the waiting set
// (take), and releases the holds of those it cannot hand out; wait is
// the earliest next token of a rate that refused one.
func (g *gate) admit(ctx context.Context, max int) (ready []transport.Delivery, wait time.Duration, err error) {
	g.mu.Lock()
	ws := slices.Clone(g.waiting)
	g.mu.Unlock()
	var in, stray []*waiter
	pl := newAdmissionPlanner()
	for len(in) < max {
		p := pl.plan(ws, max-len(in))
		if len(p.entries) == 0 {
			break
		}
		var decided []store.Admission
		if len(p.reqs) > 0 {
			a := &store.AdmitParams{Limits: *g.adm.inForce.Load(), Requests: p.reqs, TTL: g.f.holds.ttl}
			if decided, err = g.f.lim.Admit(ctx, a); err != nil {
				// The commit's outcome may be unknown (a connection lost in
				// it): holds it took would refuse these deliveries their own
				// slots until they expired, a lease later.
				hs := make([]string, len(p.reqs))
				for i, r := range p.reqs {
					hs[i] = r.Holder
				}
				g.f.holds.release(ctx, hs)
				err = fmt.Errorf("admit %d deliveries through the store: %w", len(p.reqs), err)
				break
			}
		}
		ok, st, w := p.outcome(decided)
		pl.decided(&p, ok)
		in, stray = append(in, ok...), append(stray, st...)
		if w > 0 && (wait == 0 || w < wait) {
			wait = w
		}
	}
	g.f.holds.admitted(in)
	in, gone := g.take(in)
	g.f.holds.settle(ctx, deliveries(gone))
	for _, w := range stray {
		g.f.holds.release(ctx, []string{w.holder})
	}
	return deliveries(in), wait, err
}

// take removes from the waiting set the waiters of ws (admitted, in
// order) that it hands out: in. The others are gone, their holds to be
// released: those no longer in it (a redelivery took the place of a lost
// lease, or the engine stopped, meanwhile), those whose lease was found
// lost meanwhile (they stay as placeholders for their redeliveries), and
// those behind one of these of their key, which stay waiting, to be
// decided again, so that none overtakes the message before it.
func (g *gate) take(ws []*waiter) (in, gone []*waiter) {
	if len(ws) == 0 {
		return nil, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	waiting := make(map[*waiter]bool, len(g.waiting))
	for _, w := range g.waiting {
		waiting[w] = true
	}
	held := map[string]bool{} // keys with a waiter not handed out
	out := make(map[*waiter]bool, len(ws))
	for _, w := range ws {
		if held[w.key] || !waiting[w] || w.lost.Load() != 0 {
			held[w.key] = true
			gone = append(gone, w)
			continue
		}
		out[w] = true
		in = append(in, w)
	}
	g.waiting = slices.DeleteFunc(g.waiting, func(w *waiter) bool { return out[w] })
	return in, gone
}

func deliveries(ws []*waiter) []transport.Delivery {
	if len(ws) == 0 {
		return nil
	}
	ds := make([]transport.Delivery, len(ws))
	for i, w := range ws {
		ds[i] = w.d
	}
	return ds
}

// renew extends the leases of the waiting deliveries, each extension
// bounded by timeout; a delivery whose lease was lost (handed out again)
// leaves the gate.
func (g *gate) renew(ctx context.Context, timeout time.Duration) error {
	g.mu.Lock()
	g.waiting = slices.DeleteFunc(g.waiting, func(w *waiter) bool {
		return w.lost.Load() != 0 && time.Since(time.Unix(0, w.lost.Load())) > 2*g.f.holds.ttl
	})
	var live []*waiter
	for _, w := range g.waiting {
		if w.lost.Load() == 0 {
			live = append(live, w)
		}
	}
	ds := deliveries(live)
	g.mu.Unlock()
	if len(ds) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ext := g.f.caps.leases.ext
	err := ext.ExtendLeases(ctx, ds)
	if err == nil || !errors.Is(err, transport.ErrLeaseLost) {
		return err
	}
	lost := lostLeases(ctx, ext, ds)
	g.mu.Lock()
	for i := 0; i < len(g.waiting); i++ {
		w := g.waiting[i]
		if !lost[w.d.Token] {
			continue
		}
		// The broker's redelivery, if here already, takes its place.
		j := slices.IndexFunc(g.waiting[i+1:], func(o *waiter) bool { return o.lost.Load() == 0 && o.d.Envelope.ID == w.d.Envelope.ID })
		if j < 0 {
			w.lost.Store(time.Now().UnixNano())
			continue
		}
		g.waiting[i] = g.waiting[i+1+j]
		g.waiting = slices.Delete(g.waiting, i+1+j, i+2+j)
	}
	g.mu.Unlock()
	return err
}

// close gives the waiting deliveries back to the broker (the engine is
// stopping, ctx has ended), once the receive in flight has ended, and
// any received later.
func (g *gate) close(ctx context.Context) {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.fetching.Wait() // the broker's receive in flight ends with ctx
	g.mu.Lock()
	ws := g.waiting
	g.waiting = nil
	g.mu.Unlock()
	g.giveBack(ctx, ws)
}

// giveBack returns ws to the broker for redelivery at once. A transport
// counts the redelivery as an attempt, as it counts a batch given back
// at Stop.
func (g *gate) giveBack(ctx context.Context, ws []*waiter) {
	if len(ws) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.f.cfg.StopTimeout)
	defer cancel()
	failed := 0
	var last error
	for _, w := range ws {
		if err := g.f.tr.Nack(ctx, w.d, 0); err != nil {
			failed, last = failed+1, err
		}
	}
	if failed > 0 {
		g.f.log.WarnContext(ctx, "giving back deliveries that waited for admission failed; their leases will expire", "deliveries", failed, "error", last)
	}
}

// admissionPlan is one decision on the waiting set: its entries, in
// order, each a request of reqs or free (it needs no counter, and waits
// only for the earlier entries of its key).
type admissionPlan struct {
	entries []planEntry
	reqs    []store.AdmitRequest
}

type planEntry struct {
	w   *waiter
	req int // index in reqs; -1: free
}

// admissionPlanner plans the decisions on one view of the waiting set,
// one plan after another: each plan takes the next waiters, skipping the
// keys a refusal blocked.
//
// Each key's entries are a prefix of its waiting deliveries not decided
// yet, and a request is planned after an earlier one of its key in the
// same plan only when it needs every counter that one needs: the store
// decides requests in order, and a refusal then refuses the later ones
// of the key too (a counter refused stays full or empty within one
// Admit), so that none overtakes another. The first request that does
// not need them ends its key's entries until the next plan; a refusal
// ends them for good.
type admissionPlanner struct {
	keys    map[string]*planKey
	planned map[*waiter]bool
}

type planKey struct {
	blocked bool
	last    []store.LimitKey // the needs of its last request in the plan
	held    bool             // a later waiter was left for the next plan
}

func newAdmissionPlanner() *admissionPlanner {
	return &admissionPlanner{keys: map[string]*planKey{}, planned: map[*waiter]bool{}}
}

// plan plans at most max entries among the waiters of ws not planned
// yet.
func (pl *admissionPlanner) plan(ws []*waiter, max int) admissionPlan {
	var p admissionPlan
	for _, k := range pl.keys {
		k.last, k.held = nil, false
	}
	for _, w := range ws {
		if len(p.entries) >= max {
			break
		}
		if pl.planned[w] {
			continue
		}
		k := pl.keys[w.key]
		if k == nil {
			k = &planKey{}
			pl.keys[w.key] = k
		}
		switch {
		case w.lost.Load() != 0:
			k.blocked = true
			continue
		case k.blocked || k.held:
			continue
		case len(w.needs) == 0:
			p.entries = append(p.entries, planEntry{w: w, req: -1})
		case k.last == nil || covers(w.needs, k.last):
			p.entries = append(p.entries, planEntry{w: w, req: len(p.reqs)})
			p.reqs = append(p.reqs, store.AdmitRequest{Holder: w.holder, Keys: w.needs})
			k.last = w.needs
		default:
			k.held = true
			continue
		}
		pl.planned[w] = true
	}
	return p
}

// decided records the outcome of p: the keys of its entries not all
// admitted are blocked.
func (pl *admissionPlanner) decided(p *admissionPlan, in []*waiter) {
	ok := make(map[*waiter]bool, len(in))
	for _, w := range in {
		ok[w] = true
	}
	for _, e := range p.entries {
		if !ok[e.w] {
			pl.keys[e.w.key].blocked = true
		}
	}
}

// covers reports whether needs holds every counter of earlier.
func covers(needs, earlier []store.LimitKey) bool {
	for _, k := range earlier {
		if !slices.Contains(needs, k) {
			return false
		}
	}
	return true
}

// outcome applies the store's decisions: in are the entries admitted
// before any refusal of their key, in order; stray the holders admitted
// after one (never, by the plan's rule; released at once if so); wait
// the earliest next token of a rate that refused one.
func (p *admissionPlan) outcome(decided []store.Admission) (in, stray []*waiter, wait time.Duration) {
	refused := map[string]bool{}
	for _, e := range p.entries {
		switch {
		case refused[e.w.key]:
			if e.req >= 0 && decided[e.req].Admitted {
				stray = append(stray, e.w)
			}
		case e.req >= 0 && !decided[e.req].Admitted:
			refused[e.w.key] = true
			if d := decided[e.req].Wait; d > 0 && (wait == 0 || d < wait) {
				wait = d
			}
		default:
			in = append(in, e.w)
		}
	}
	return in, stray, wait
}

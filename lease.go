package idem

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idemhq/idem/transport"
)

// leases keeps the leases of the batches still running alive, on a
// transport that can extend them (transport.LeaseExtender): without it, a
// handler slower than the lease has its whole batch handed to another
// consumer, every commit refused as "lease lost", and runs again (a
// livelock). A consumer keeps the leases of the batch it runs (keep);
// each renewal extends, every third of the lease, those of the batch's
// deliveries not yet settled, for at most Config.MaxLeaseRenewal. The
// settler releases a delivery before it settles it, so that no extension
// replaces a Nack's delay.
type leases struct {
	ext   transport.LeaseExtender
	every time.Duration
	max   time.Duration // how long one batch's leases are renewed
	log   *slog.Logger
	// holds, when set, extends the flow-control holds of the deliveries
	// whose leases a renewal extended (admission beside a broker,
	// flow_broker.go).
	holds func(context.Context, []transport.Delivery) error
	mu    sync.Mutex
	held  map[string]*renewal // by delivery token
}

// defaultRenewalLeases is Config.MaxLeaseRenewal's default, in leases.
const defaultRenewalLeases = 10

// limit sets how long one batch's leases are renewed (0: ten leases), and
// where reaching that limit is logged. A nil ls does nothing.
func (ls *leases) limit(max time.Duration, log *slog.Logger) {
	if ls == nil {
		return
	}
	if max <= 0 {
		max = defaultRenewalLeases * ls.ext.LeaseDuration()
	}
	ls.max, ls.log = max, log
}

// newLeases returns the leases of ext, or nil when they cannot be kept
// (no extender, or no lease).
func newLeases(ext transport.LeaseExtender) *leases {
	if ext == nil || ext.LeaseDuration() <= 0 {
		return nil
	}
	d := ext.LeaseDuration()
	return &leases{ext: ext, every: d / 3, max: defaultRenewalLeases * d, log: slog.Default(), held: map[string]*renewal{}}
}

// renewal keeps the leases of one batch's unsettled deliveries.
type renewal struct {
	ls    *leases
	ctx   context.Context
	fails *failures  // nil: failures are not logged
	mu    sync.Mutex // held during an extension: a release waits for it
	ds    map[string]transport.Delivery
	timer *time.Timer
	until time.Time // renewals end here (Config.MaxLeaseRenewal)
	done  bool
}

// keep renews the leases of ds, every third of the lease, until stop;
// each renewal's outcome goes to fails, when set, which logs the failures
// (once while one repeats). It returns nil (whose stop does nothing) when
// ls is nil.
func (ls *leases) keep(ctx context.Context, ds []transport.Delivery, fails *failures) *renewal {
	if ls == nil || len(ds) == 0 {
		return nil
	}
	r := &renewal{ls: ls, ctx: ctx, fails: fails, ds: make(map[string]transport.Delivery, len(ds)), until: time.Now().Add(ls.max)}
	ls.mu.Lock()
	for _, d := range ds {
		r.ds[d.Token] = d
		ls.held[d.Token] = r
	}
	ls.mu.Unlock()
	r.mu.Lock()
	r.timer = time.AfterFunc(ls.every, r.renew)
	r.mu.Unlock()
	return r
}

// renew extends the leases of the batch's unsettled deliveries, and
// arms the next renewal; past the renewal limit it stops, and logs the
// messages whose leases will run out. An extension waits at most a
// renewal period: a release (before every settle) waits for it.
func (r *renewal) renew() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || len(r.ds) == 0 || r.ctx.Err() != nil {
		return
	}
	ds := make([]transport.Delivery, 0, len(r.ds))
	for _, d := range r.ds {
		ds = append(ds, d)
	}
	if !time.Now().Before(r.until) {
		r.done = true
		ids := make([]string, 0, min(len(ds), 10))
		for _, d := range ds[:min(len(ds), 10)] {
			ids = append(ids, d.Envelope.ID)
		}
		r.ls.log.ErrorContext(r.ctx, "a batch outlived Config.MaxLeaseRenewal: its leases are no longer renewed, and another consumer may take it",
			"max_lease_renewal", r.ls.max.String(), "deliveries", len(ds), "message_ids", ids)
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.ls.every)
	var herr error
	var wg sync.WaitGroup
	if r.ls.holds != nil {
		wg.Add(1)
		go func() { defer wg.Done(); herr = r.ls.holds(ctx, ds) }()
	}
	err := r.ls.ext.ExtendLeases(ctx, ds)
	wg.Wait()
	err = errors.Join(err, herr)
	cancel()
	if r.fails != nil {
		r.fails.report(r.ctx, err)
	}
	r.timer.Reset(r.ls.every)
}

// stop ends the renewals of the batch, waiting for one in flight; the
// leases of its deliveries still unsettled then run out as the transport
// says. A nil r does nothing.
func (r *renewal) stop() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.done = true
	r.timer.Stop()
	ds := r.ds
	r.ds = nil
	r.mu.Unlock()
	r.ls.mu.Lock()
	for tok := range ds {
		if r.ls.held[tok] == r {
			delete(r.ls.held, tok)
		}
	}
	r.ls.mu.Unlock()
}

// release stops renewing the leases of ds, which are about to be settled,
// waiting for an extension in flight. A nil ls does nothing.
func (ls *leases) release(ds ...transport.Delivery) {
	if ls == nil || len(ds) == 0 {
		return
	}
	ls.releaseBy(len(ds), func(i int) string { return ds[i].Token })
}

// releaseItems is release for the deliveries of items.
func (ls *leases) releaseItems(items []*item) {
	if ls == nil || len(items) == 0 {
		return
	}
	ls.releaseBy(len(items), func(i int) string { return items[i].d.Token })
}

// releaseBy releases the n deliveries whose tokens token gives, taking
// each lock once (a lane's deliveries are usually one batch's).
func (ls *leases) releaseBy(n int, token func(i int) string) {
	var one *renewal // the renewal of every token so far, if just one
	var toks []string
	var more map[*renewal][]string
	ls.mu.Lock()
	for i := range n {
		tok := token(i)
		r := ls.held[tok]
		switch {
		case r == nil:
			continue
		case one == nil || one == r:
			one = r
			toks = append(toks, tok)
		default:
			if more == nil {
				more = map[*renewal][]string{}
			}
			more[r] = append(more[r], tok)
		}
		delete(ls.held, tok)
	}
	ls.mu.Unlock()
	one.forget(toks)
	for r, toks := range more {
		r.forget(toks)
	}
}

// forget stops renewing the leases of toks; a nil r does nothing.
func (r *renewal) forget(toks []string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	for _, tok := range toks {
		delete(r.ds, tok)
	}
	r.mu.Unlock()
}

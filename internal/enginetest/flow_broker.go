package enginetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// BrokerRig opens what one case of FlowBroker needs: a fresh store that
// keeps limits (a store.Limiter), and a function that opens transports
// on one fresh stream of the broker (each call a new connection, for a
// replica of its own), leased for a short time (a second or so) that
// the transport extends (transport.LeaseExtender).
type BrokerRig func(t *testing.T) (st store.Store, open func() transport.Transport)

// noteType is a message FlowBroker's engines consume under no limit.
const noteType = "flow.Note"

// FlowBroker runs the admission cases that apply beside a broker:
//
//   - cap: the cap binds per tenant, failures release their slots, none
//     leaks (FlowBeside);
//   - change: a cap raised at runtime reaches a waiting delivery
//     (FlowChangeBeside);
//   - two engines: a cap of 1, and one of 2, holds across two replicas on
//     one broker and one store;
//   - attempts: a delivery that waits for admission, leases long, is not
//     counted as a failed attempt (a broker's redelivery count would
//     dead-letter it);
//   - key order: a later message of a key never overtakes a waiting
//     earlier one, even one that needs no limit, while other keys pass;
//   - released in the commit: the unit of work that settles a message
//     releases its holds, with no other call to the store;
//   - crash: the holds of a replica that stops renewing them (killed, or
//     stuck past Config.StopTimeout) expire within a few leases.
func FlowBroker(t *testing.T, rig BrokerRig) {
	t.Run("cap", func(t *testing.T) {
		st, open := rig(t)
		FlowBeside(t, st, open())
	})
	t.Run("change", func(t *testing.T) {
		st, open := rig(t)
		FlowChangeBeside(t, st, open())
	})
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprintf("two engines, cap %d", limit), func(t *testing.T) { flowTwoEngines(t, rig, limit) })
	}
	t.Run("attempts", func(t *testing.T) { flowAttempts(t, rig) })
	t.Run("key order", func(t *testing.T) { flowKeyOrder(t, rig) })
	t.Run("released in the commit", func(t *testing.T) { flowReleasedInCommit(t, rig) })
	t.Run("crash", func(t *testing.T) { flowCrash(t, rig) })
}

// calls records a test handler's calls: in flight at once (the most
// seen), the order they entered in, and how each ended.
type calls struct {
	mu      sync.Mutex
	now     int
	most    int
	entered []string
	tries   map[string]int
	handled map[string]bool
}

func newCalls() *calls { return &calls{tries: map[string]int{}, handled: map[string]bool{}} }

// enter records a call of id and returns its try (1 for the first).
func (c *calls) enter(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now++
	c.most = max(c.most, c.now)
	c.entered = append(c.entered, id)
	c.tries[id]++
	return c.tries[id]
}

// note records an event among the calls entered.
func (c *calls) note(event string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entered = append(c.entered, event)
}

func (c *calls) leave(id string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now--
	if ok {
		c.handled[id] = true
	}
}

func (c *calls) allHandled(ids ...string) func() (bool, error) {
	return func() (bool, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, id := range ids {
			if !c.handled[id] {
				return false, nil
			}
		}
		return true, nil
	}
}

// startWith starts an engine on st and tr with cfg and the handlers,
// stopped when the test ends (within stop, when set).
func startWith(ctx context.Context, t *testing.T, st store.Store, tr transport.Transport, cfg *idem.Config, handlers map[string]idem.HandlerFunc) *idem.Engine {
	t.Helper()
	e := NewEngine(t, st, tr, cfg)
	for typ, h := range handlers {
		if err := e.Handle(typ, h); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Stop(sctx)
	})
	return e
}

// inFlight returns the live holds of the store's counters, summed.
func inFlight(ctx context.Context, lim store.Limiter) (int, error) {
	uses, err := lim.LimitUses(ctx)
	n := 0
	for _, u := range uses {
		n += u.InFlight
	}
	return n, err
}

func parseEnvs(prefix string, n int) []idem.Envelope {
	out := make([]idem.Envelope, n)
	for i := range out {
		out[i] = idem.Envelope{ID: fmt.Sprintf("%s-%d", prefix, i), Type: parseType, CorrelationID: fmt.Sprintf("%s-file-%d", prefix, i)}
	}
	return out
}

func ids(envs []idem.Envelope) []string {
	out := make([]string, len(envs))
	for i := range envs {
		out[i] = envs[i].ID
	}
	return out
}

// flowTwoEngines: two replicas, each with lanes and consumers for four
// calls at once, share a cap of limit; each call lasts long enough for
// others to join it, so without the cap more would run at once.
func flowTwoEngines(t *testing.T, rig BrokerRig, limit int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, open := rig(t)
	c := newCalls()
	h := func(ctx context.Context, env idem.Envelope) error {
		c.enter(env.ID)
		defer c.leave(env.ID, true)
		select { // the call's work: others may join it meanwhile
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}
	cfg := func() *idem.Config {
		return &idem.Config{BatchSize: 1, Lanes: 4, Consumers: 4, LimitsInterval: 50 * time.Millisecond,
			Limits: []idem.Limit{{Name: "parser-api", MessageTypes: []string{parseType}, Concurrency: limit}}}
	}
	e1 := startWith(ctx, t, st, open(), cfg(), map[string]idem.HandlerFunc{parseType: h})
	startWith(ctx, t, st, open(), cfg(), map[string]idem.HandlerFunc{parseType: h})
	envs := parseEnvs("two", 24)
	if err := e1.Publish(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, time.Minute, "every call handled by the two engines", c.allHandled(ids(envs)...))
	c.mu.Lock()
	most := c.most
	c.mu.Unlock()
	if most > limit {
		t.Errorf("%d calls ran at once across the two engines, over the cap of %d", most, limit)
	}
	WaitFor(t, time.Minute, "no hold left once every call settled", func() (bool, error) {
		n, err := inFlight(ctx, st.(store.Limiter))
		return n == 0, err
	})
}

// flowAttempts: under a cap of 1 with Config.MaxAttempts 2, each call
// fails at its first try after holding its slot for two leases (its
// holds, which live a lease, are extended with its lease meanwhile), and
// succeeds at its second. The others wait for leases meanwhile; a wait
// counted as an attempt (a delivery given back to the broker when
// refused) would reach its first try at attempt 2 and be dead-lettered.
func flowAttempts(t *testing.T, rig BrokerRig) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, open := rig(t)
	tr := &attemptsSeen{Transport: open()}
	lease := leaseOf(t, tr.Transport)
	c := newCalls()
	h := func(ctx context.Context, env idem.Envelope) error {
		ok := false
		defer func() { c.leave(env.ID, ok) }()
		if c.enter(env.ID) == 1 {
			select { // hold the slot past the holds' TTL (a lease), then fail
			case <-time.After(2 * lease):
			case <-ctx.Done():
			}
			return errors.New("parser busy")
		}
		ok = true
		return nil
	}
	e := startWith(ctx, t, st, tr, &idem.Config{BatchSize: 1, Lanes: 4, Consumers: 2, MaxAttempts: 2,
		RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond,
		Limits: []idem.Limit{{Name: "parser-api", MessageTypes: []string{parseType}, Concurrency: 1}}},
		map[string]idem.HandlerFunc{parseType: h})
	envs := parseEnvs("tries", 3)
	if err := e.Publish(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, time.Minute, "every call settled", func() (bool, error) {
		for _, id := range ids(envs) {
			c.mu.Lock()
			done := c.handled[id]
			c.mu.Unlock()
			_, err := st.GetDeadLetter(ctx, id)
			if err == nil {
				return false, fmt.Errorf("message %s was dead-lettered: its waits for admission were counted as attempts", id)
			}
			if !errors.Is(err, store.ErrNotFound) {
				return false, err
			}
			if !done {
				return false, nil
			}
		}
		return true, nil
	})
	c.mu.Lock()
	most := c.most
	c.mu.Unlock()
	if most > 1 {
		t.Errorf("%d calls ran at once under a cap of 1: a hold lapsed while its call ran (its holds were not extended with its lease)", most)
	}
	if most := tr.most.Load(); most > 2 {
		t.Errorf("a delivery came at attempt %d; want at most 2 (the first try, and the retry after its failure): waiting for admission counted attempts", most)
	}
}

// attemptsSeen is a transport that records the highest
// transport.Delivery.Attempt it received.
type attemptsSeen struct {
	transport.Transport
	most atomic.Int64
}

func (a *attemptsSeen) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	ds, err := a.Transport.Receive(ctx, max)
	for _, d := range ds {
		for {
			m := a.most.Load()
			if int64(d.Attempt) <= m || a.most.CompareAndSwap(m, int64(d.Attempt)) {
				break
			}
		}
	}
	return ds, err
}

func (a *attemptsSeen) LeaseDuration() time.Duration {
	return a.Transport.(transport.LeaseExtender).LeaseDuration()
}

func (a *attemptsSeen) ExtendLeases(ctx context.Context, ds []transport.Delivery) error {
	return a.Transport.(transport.LeaseExtender).ExtendLeases(ctx, ds)
}

func leaseOf(t *testing.T, tr transport.Transport) time.Duration {
	t.Helper()
	ext, ok := tr.(transport.LeaseExtender)
	if !ok || ext.LeaseDuration() <= 0 {
		t.Fatalf("%T does not extend leases", tr)
	}
	return ext.LeaseDuration()
}

// flowKeyOrder: under a cap of 1 on parseType, p1 of key k1 holds the
// slot and p2 of k1 waits; n3 of k1 needs no limit but must wait behind
// p2, while n4 of key k2 passes at once.
func flowKeyOrder(t *testing.T, rig BrokerRig) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, open := rig(t)
	c := newCalls()
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	h := func(ctx context.Context, env idem.Envelope) error {
		c.enter(env.ID)
		if env.ID == "p1" {
			select {
			case <-gate:
			case <-ctx.Done():
				c.leave(env.ID, false)
				return ctx.Err()
			}
			c.note("p1 left")
		}
		c.leave(env.ID, true)
		return nil
	}
	// One message a batch: a batch ends when its slowest lane does.
	e := startWith(ctx, t, st, open(), &idem.Config{BatchSize: 1, Lanes: 4, Consumers: 4, LimitsInterval: 50 * time.Millisecond,
		Limits: []idem.Limit{{Name: "parser-api", MessageTypes: []string{parseType}, Concurrency: 1}}},
		map[string]idem.HandlerFunc{parseType: h, noteType: h})
	for _, env := range []idem.Envelope{
		{ID: "p1", Type: parseType, CorrelationID: "k1"},
		{ID: "p2", Type: parseType, CorrelationID: "k1"},
		{ID: "n3", Type: noteType, CorrelationID: "k1"},
		{ID: "n4", Type: noteType, CorrelationID: "k2"},
	} {
		// One at a time, so that the broker hands them out in this order.
		if err := e.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	WaitFor(t, time.Minute, "n4, of another key, handled while p1 holds the slot", c.allHandled("n4"))
	release()
	WaitFor(t, time.Minute, "every message handled", c.allHandled("p1", "p2", "n3", "n4"))
	c.mu.Lock()
	order := slices.Clone(c.entered)
	c.mu.Unlock()
	// p2 is admitted once p1 left; n3 is handed out after p2, though
	// the engine may then run the two handlers in either order.
	if left, n3 := slices.Index(order, "p1 left"), slices.Index(order, "n3"); n3 < left {
		t.Errorf("calls entered in order %v: n3 ran while p1 held the slot, overtaking p2, an earlier message of its key waiting for admission", order)
	}
}

// flowCrash: a replica admits p1, then loses its store while p1's
// handler runs (as if killed: it can neither commit, nor release, nor
// extend its holds); its hold expires within a few leases, and another
// replica then handles p1 and p2 under the cap of 1.
func flowCrash(t *testing.T, rig BrokerRig) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, open := rig(t)
	lim := st.(store.Limiter)
	tr1 := open()
	lease := leaseOf(t, tr1)
	cfg := func() *idem.Config {
		return &idem.Config{BatchSize: 1, Lanes: 2, Consumers: 1,
			Limits: []idem.Limit{{Name: "parser-api", MessageTypes: []string{parseType}, Concurrency: 1}}}
	}
	dying := &dyingStore{Store: st, Limiter: lim}
	stuck := make(chan struct{})
	c1 := newCalls()
	e1 := startWith(ctx, t, dying, tr1, cfg(), map[string]idem.HandlerFunc{parseType: func(ctx context.Context, env idem.Envelope) error {
		c1.enter(env.ID)
		<-stuck
		return nil
	}})
	if err := e1.Publish(ctx, parseEnvs("crash", 2)...); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, time.Minute, "the first call in the first replica, holding the slot", func() (bool, error) {
		n, err := inFlight(ctx, lim)
		c1.mu.Lock()
		defer c1.mu.Unlock()
		return n == 1 && len(c1.entered) == 1, err
	})
	dying.dead.Store(true)
	close(stuck)
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	_ = e1.Stop(sctx) // its hold stays in the store
	tr2 := open()
	if tr2 != tr1 {
		_ = tr1.Close() // and its connection dies: the broker hands its deliveries out again
	}
	WaitFor(t, 10*lease, "the dead replica's hold expired", func() (bool, error) {
		n, err := inFlight(ctx, lim)
		return n == 0, err
	})
	c2 := newCalls()
	startWith(ctx, t, st, tr2, cfg(), map[string]idem.HandlerFunc{parseType: func(_ context.Context, env idem.Envelope) error {
		c2.enter(env.ID)
		c2.leave(env.ID, true)
		return nil
	}})
	WaitFor(t, time.Minute, "both calls handled by the second replica", c2.allHandled(ids(parseEnvs("crash", 2))...))
}

// dyingStore is a replica's view of a store that it loses when dead is
// set: every unit of work, admission and hold's extension or release
// fails from then on, as for a process killed.
type dyingStore struct {
	store.Store
	store.Limiter
	dead atomic.Bool
	// noRelease, when set, refuses ReleaseHolds, and ttl, when set,
	// replaces the holds' TTL: only a commit then releases a hold.
	noRelease bool
	ttl       time.Duration
}

var errDead = errors.New("enginetest: the replica is dead")

func (d *dyingStore) Begin(ctx context.Context) (store.UnitOfWork, error) {
	if d.dead.Load() {
		return nil, errDead
	}
	return d.Store.Begin(ctx)
}

func (d *dyingStore) Admit(ctx context.Context, p *store.AdmitParams) ([]store.Admission, error) {
	if d.dead.Load() {
		return nil, errDead
	}
	if d.ttl > 0 {
		p.TTL = d.ttl
	}
	return d.Limiter.Admit(ctx, p)
}

func (d *dyingStore) ExtendHolds(ctx context.Context, holders []string, ttl time.Duration) error {
	if d.dead.Load() {
		return errDead
	}
	return d.Limiter.ExtendHolds(ctx, holders, ttl)
}

func (d *dyingStore) ReleaseHolds(ctx context.Context, holders []string) error {
	if d.dead.Load() || d.noRelease {
		return errDead
	}
	return d.Limiter.ReleaseHolds(ctx, holders)
}

// flowReleasedInCommit: under a cap of 1, with holds that outlive the
// test and a store that refuses Limiter.ReleaseHolds, three calls run one
// after the other: each hold is released by the commit that records its
// message's outcome (store.Changes.ReleaseHolds), or the next call would
// never be admitted.
func flowReleasedInCommit(t *testing.T, rig BrokerRig) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, open := rig(t)
	lim := st.(store.Limiter)
	c := newCalls()
	e := startWith(ctx, t, &dyingStore{Store: st, Limiter: lim, noRelease: true, ttl: time.Hour}, open(),
		&idem.Config{BatchSize: 1, Lanes: 4, Consumers: 2,
			Limits: []idem.Limit{{Name: "parser-api", MessageTypes: []string{parseType}, Concurrency: 1}}},
		map[string]idem.HandlerFunc{parseType: func(_ context.Context, env idem.Envelope) error {
			c.enter(env.ID)
			c.leave(env.ID, true)
			return nil
		}})
	envs := parseEnvs("commit", 3)
	if err := e.Publish(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, time.Minute, "every call handled, one hold after the other", c.allHandled(ids(envs)...))
	WaitFor(t, time.Minute, "no hold left", func() (bool, error) {
		n, err := inFlight(ctx, lim)
		return n == 0, err
	})
}

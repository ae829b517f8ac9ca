package enginetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// parseType is the message the Flow case's handler consumes: a call to a
// parser whose API takes at most flowCap calls at once per tenant.
const (
	parseType = "flow.Parse"
	flowCap   = 2
)

// tenantsInFlight counts the handler's calls in flight by tenant, the
// most seen at once, and the calls handled.
type tenantsInFlight struct {
	mu      sync.Mutex
	now     map[string]int
	most    map[string]int
	handled map[string]bool
	order   []string       // the message IDs handled, in the order they ended
	fails   map[string]int // attempts each message ID failed so far
}

func (f *tenantsInFlight) enter(tenant string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now[tenant]++
	f.most[tenant] = max(f.most[tenant], f.now[tenant])
}

func (f *tenantsInFlight) leave(tenant, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now[tenant]--
	f.handled[id] = true
	f.order = append(f.order, id)
}

func (f *tenantsInFlight) read(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// parserRig is an engine on a store's queue whose plain handler of
// parseType calls a parser: it counts the calls in flight by the tenant
// header, fails as the "fail" header says ("once", "always"), and holds
// every other call until open.
type parserRig struct {
	f    *tenantsInFlight
	e    *idem.Engine
	open func()
}

// startParser starts a parserRig with cfg; the test's cleanup opens the
// gate (a failed test leaves no call waiting) and stops the engine.
func startParser(ctx context.Context, t *testing.T, st store.Store, tr transport.Transport, cfg *idem.Config) *parserRig {
	t.Helper()
	f := &tenantsInFlight{now: map[string]int{}, most: map[string]int{}, handled: map[string]bool{}, fails: map[string]int{}}
	gate := make(chan struct{})
	var once sync.Once
	r := &parserRig{f: f, e: NewEngine(t, st, tr, cfg), open: func() { once.Do(func() { close(gate) }) }}
	if err := r.e.Handle(parseType, func(ctx context.Context, env idem.Envelope) error {
		tenant := env.Headers["tenant"]
		f.enter(tenant)
		defer f.leave(tenant, env.ID)
		switch env.Headers["fail"] {
		case "once":
			f.mu.Lock()
			f.fails[env.ID]++
			n := f.fails[env.ID]
			f.mu.Unlock()
			if n == 1 {
				return errors.New("parser busy")
			}
		case "always":
			return idem.Permanent(errors.New("parser refuses this file"))
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.open()
		_ = r.e.Stop(context.Background())
	})
	return r
}

// Flow runs a plain handler under a concurrency cap of flowCap per
// tenant (Config.Limits, keyed by a header) on q, as store and transport:
//
//   - four calls of tenant a and two of tenant b, the handler holding
//     each until released: exactly flowCap of each tenant are admitted at
//     once, and never more run at once, although the engine has lanes for
//     all six;
//   - a call that fails once and one that fails for good: given back and
//     dead-lettered, each releases its slot;
//
// and at the end the store shows no slot in use (none leaked).
func Flow(t *testing.T, q store.Queue) {
	t.Helper()
	FlowBeside(t, q, q)
}

// FlowBeside is Flow with st as store and tr as transport: beside a
// broker, the engine admits through st (a store.Limiter) after each
// receive.
func FlowBeside(t *testing.T, st store.Store, tr transport.Transport) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lim, ok := st.(store.Limiter)
	if !ok {
		t.Fatalf("%T is not a store.Limiter", st)
	}
	r := startParser(ctx, t, st, tr, &idem.Config{BatchSize: 1, Lanes: 8, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond,
		Limits: []idem.Limit{{Name: "parser-api", MessageTypes: []string{parseType}, Concurrency: flowCap,
			Key: func(env *idem.Envelope) string {
				if env.Headers["tenant"] == "boom" {
					panic("no tenant")
				}
				return env.Headers["tenant"]
			}}}})
	f, e, open := r.f, r.e, r.open

	var envs []idem.Envelope
	for i, tenant := range []string{"a", "a", "b", "a", "b", "a"} {
		envs = append(envs, idem.Envelope{ID: fmt.Sprintf("p-%d", i), Type: parseType, CorrelationID: fmt.Sprintf("file-%d", i),
			Headers: map[string]string{"tenant": tenant}})
	}
	if err := e.Publish(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	// Every admitted call holds its slot until its commit, which waits
	// for the gate: the store shows what the engine admitted at once.
	held := map[string]int{}
	WaitFor(t, time.Minute, "the calls admitted at once", func() (bool, error) {
		uses, err := lim.LimitUses(ctx)
		clear(held)
		n := 0
		for _, u := range uses {
			held[u.Key] += u.InFlight
			n += u.InFlight
		}
		return n >= 2*flowCap, err
	})
	if held["a"] != flowCap || held["b"] != flowCap {
		t.Errorf("admitted at once: tenant a %d, tenant b %d; want %d each (the cap binds per tenant)", held["a"], held["b"], flowCap)
	}
	open()
	WaitFor(t, time.Minute, "every call handled", func() (bool, error) {
		var n int
		f.read(func() { n = len(f.handled) })
		return n == len(envs), nil
	})

	// A call given back releases its slot, and so does one dead-lettered;
	// a tenant no store keeps as a counter's key, and one whose Key
	// panics, are admitted under a key of their own.
	hostile := "<script>" + strings.Repeat("t", 300) // headers refuse NUL and invalid UTF-8; too long for a counter key
	if err := e.Publish(ctx,
		idem.Envelope{ID: "c-once", Type: parseType, CorrelationID: "file-c1", Headers: map[string]string{"tenant": "c", "fail": "once"}},
		idem.Envelope{ID: "c-always", Type: parseType, CorrelationID: "file-c2", Headers: map[string]string{"tenant": "c", "fail": "always"}},
		idem.Envelope{ID: "d-hostile", Type: parseType, CorrelationID: "file-d1", Headers: map[string]string{"tenant": hostile}},
		idem.Envelope{ID: "d-panic", Type: parseType, CorrelationID: "file-d2", Headers: map[string]string{"tenant": "boom"}},
	); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, time.Minute, "the failing, hostile and panicking calls settled", func() (bool, error) {
		var again bool
		f.read(func() { again = f.fails["c-once"] >= 2 && f.handled["d-hostile"] && f.handled["d-panic"] })
		_, err := st.GetDeadLetter(ctx, "c-always")
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		return again && err == nil, err
	})
	f.read(func() {
		for tenant, most := range f.most {
			if most > flowCap {
				t.Errorf("tenant %s had %d calls in flight at once, over its cap of %d", tenant, most, flowCap)
			}
		}
	})
	WaitFor(t, time.Minute, "no slot in use once every call settled", func() (bool, error) {
		uses, err := lim.LimitUses(ctx)
		for _, u := range uses {
			if u.InFlight != 0 {
				return false, err
			}
		}
		return true, err
	})
}

// FlowChange raises a cap at runtime while a message waits for it: with
// the cap at 1 and the first call held, the second waits; once the
// store's override raises the cap to 2, the second is admitted while the
// first still runs, within a few Config.LimitsInterval, although nothing
// was released meanwhile.
func FlowChange(t *testing.T, q store.Queue) {
	t.Helper()
	FlowChangeBeside(t, q, q)
}

// FlowChangeBeside is FlowChange with st as store and tr as transport.
func FlowChangeBeside(t *testing.T, st store.Store, tr transport.Transport) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lim, ok := st.(store.Limiter)
	if !ok {
		t.Fatalf("%T is not a store.Limiter", st)
	}
	// Two consumers: one runs the batch of the held call while the other
	// receives (a consumer takes its next batch once its last one ended).
	r := startParser(ctx, t, st, tr, &idem.Config{BatchSize: 1, Lanes: 4, Consumers: 2, LimitsInterval: 20 * time.Millisecond,
		Limits: []idem.Limit{{Name: "parser-api", MessageTypes: []string{parseType}, Concurrency: 1}}})
	f, e, open := r.f, r.e, r.open
	if err := e.Publish(ctx,
		idem.Envelope{ID: "first", Type: parseType, CorrelationID: "file-1"},
		idem.Envelope{ID: "second", Type: parseType, CorrelationID: "file-2"},
	); err != nil {
		t.Fatal(err)
	}
	inFlight := func(n int) func() (bool, error) {
		return func() (bool, error) {
			var got int
			f.read(func() { got = f.now[""] })
			return got == n, nil
		}
	}
	WaitFor(t, time.Minute, "the first call in flight", inFlight(1))
	if err := lim.SetLimit(ctx, store.Limit{Name: "parser-api", Concurrency: 2}); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, time.Minute, "the second call admitted under the raised cap, the first still running", inFlight(2))
	open()
}

// FlowFair runs a plain handler one call at a time with Config.FairShare
// on q, as store and transport: 30 calls of a flooding tenant are queued
// ahead of 2 of a quiet one, in one publish, while the first call holds
// the only lane. In fair order the quiet tenant's calls are among the
// first five handled; in the queue's order they would come last. A
// message with an invalid priority header is refused at publish, naming
// the header.
func FlowFair(t *testing.T, q store.Queue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := startParser(ctx, t, q, q, &idem.Config{BatchSize: 1, Lanes: 1, FairShare: true})
	bad := idem.Envelope{ID: "bad", Type: parseType, Headers: map[string]string{transport.HeaderPriority: "urgent"}}
	if err := r.e.Publish(ctx, bad); !errors.Is(err, idem.ErrInvalidEnvelope) || !strings.Contains(err.Error(), transport.HeaderPriority) {
		t.Fatalf("publish with priority %q: got %v, want ErrInvalidEnvelope naming %s", "urgent", err, transport.HeaderPriority)
	}
	var envs []idem.Envelope
	for i := range 32 {
		tenant := "flood"
		if i >= 30 {
			tenant = "quiet"
		}
		envs = append(envs, idem.Envelope{ID: fmt.Sprintf("%s-%02d", tenant, i), Type: parseType, CorrelationID: fmt.Sprint("file-", i),
			Headers: map[string]string{"tenant": tenant, transport.HeaderFairnessKey: tenant}})
	}
	if err := r.e.Publish(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	r.open()
	WaitFor(t, time.Minute, "every call handled", func() (bool, error) {
		var n int
		r.f.read(func() { n = len(r.f.order) })
		return n == len(envs), nil
	})
	r.f.read(func() {
		for _, id := range []string{"quiet-30", "quiet-31"} {
			if at := slices.Index(r.f.order, id); at < 0 || at >= 5 {
				t.Errorf("%s was handled in place %d of %d, want among the first 5 (fair share): order %v", id, at+1, len(envs), r.f.order)
			}
		}
	})
}

package idem

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// The split counts the replicas alive that take a share, itself
// included, in the order of their IDs.
func TestSplitCountsAliveSharingReplicas(t *testing.T) {
	now := time.Now()
	share := map[string]string{shareSummary: shareScheme}
	rs := []store.Replica{
		{ID: "c", BeatAt: now, Interval: time.Second, Config: share},
		{ID: "a", BeatAt: now, Interval: time.Second, Config: share},
		{ID: "d", BeatAt: now.Add(-time.Minute), Interval: time.Second, Config: share},                                  // gone
		{ID: "e", BeatAt: now, StoppedAt: now, Interval: time.Second, Config: share},                                    // stopped
		{ID: "f", BeatAt: now, Interval: time.Second, Config: map[string]string{"lanes": "4"}},                          // reads the whole queue
		{ID: "g", BeatAt: now, Interval: time.Second, Config: map[string]string{shareSummary: "true"}},                  // another scheme
		{ID: "h", BeatAt: now, Interval: time.Second, Config: share, Definitions: map[string]string{"order": "v1:old"}}, // another build
	}
	if got := split(rs, "b", nil, now); got.Part != 1 || got.Parts != 3 {
		t.Errorf("b's share among a, c and b: %+v, want part 1 of 3", got)
	}
	if got := split(nil, "b", nil, now); got.Part != 0 || got.Parts != 1 {
		t.Errorf("b alone: %+v, want the whole queue", got)
	}
}

// sharedStore opens a pgstore on a fresh schema, dropped when t ends; the
// engines of one test share it.
func sharedStore(t *testing.T, schema string) *pgstore.Store {
	t.Helper()
	url := testenv.PostgresURL(t)
	ctx := context.Background()
	st, err := pgstore.Open(ctx, url, &pgstore.Config{Schema: schema, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = st.Close()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	return st
}

// handled records which replica handled each message, by key.
type handled struct {
	mu    sync.Mutex
	byKey map[string]map[string]bool // key → replica IDs
	n     int
}

func (h *handled) handler(replica *string) func(context.Context, Envelope) error {
	return func(_ context.Context, env Envelope) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.byKey[env.CorrelationID] == nil {
			h.byKey[env.CorrelationID] = map[string]bool{}
		}
		h.byKey[env.CorrelationID][*replica] = true
		h.n++
		return nil
	}
}

func (h *handled) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// startShared starts an engine on st (store and transport) whose handler
// records into h, with its shares' steal set to steal.
func startShared(t *testing.T, ctx context.Context, st *pgstore.Store, h *handled, steal time.Duration) *Engine {
	t.Helper()
	e, err := NewEngine(st, st, &Config{BatchSize: 8, Lanes: 2, Consumers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if e.shares == nil {
		t.Fatal("an engine on pgstore's queue takes no share")
	}
	e.shares.steal = steal
	id := e.ReplicaID()
	if err := e.Handle("share.Msg", h.handler(&id)); err != nil {
		t.Fatal(err)
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

func publishKeys(t *testing.T, ctx context.Context, e *Engine, keys, each int) {
	t.Helper()
	for i := range keys * each {
		env := Envelope{ID: fmt.Sprintf("m%d", i), Type: "share.Msg", CorrelationID: fmt.Sprintf("key-%d", i%keys)}
		if err := e.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
}

// Two replicas on one queue split it: each key's messages are handled by
// the replica whose partition it is, and by no other (without shares
// both receive every key, and their units of work race for its saga).
func TestSharesKeepAKeyInOneReplica(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := sharedStore(t, "shares_"+fmt.Sprint(time.Now().UnixNano()))
	h := &handled{byKey: map[string]map[string]bool{}}
	es := []*Engine{startShared(t, ctx, st, h, time.Hour), startShared(t, ctx, st, h, time.Hour)}
	waitUntil(t, 30*time.Second, "both replicas take half the queue", func() bool {
		for _, e := range es {
			if e.shares.cur.Load().Parts != 2 {
				return false
			}
		}
		return true
	})
	owner := map[int]string{}
	for _, e := range es {
		owner[e.shares.cur.Load().Part] = e.ReplicaID()
	}
	if len(owner) != 2 {
		t.Fatalf("the replicas took the same partition: %v", owner)
	}
	const keys, each = 40, 10
	publishKeys(t, ctx, es[0], keys, each)
	waitUntil(t, time.Minute, "every message handled", func() bool { return h.count() >= keys*each })
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, by := range h.byKey {
		want := owner[transport.ShareOf(transport.PartitionKey(&transport.Envelope{ID: "x", CorrelationID: k}), 2)]
		if len(by) != 1 || !by[want] {
			t.Errorf("key %s handled by replicas %v, want only %s, its partition's", k, by, want)
		}
	}
}

// A replica whose share is empty takes the messages of a share no running
// replica reads, once they have waited the steal: a share is never
// stranded, here by a replica that beats but does not consume.
func TestSharesStealAShareNobodyReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := sharedStore(t, "shares_"+fmt.Sprint(time.Now().UnixNano()))
	ghost := &store.Replica{ID: "ghost", StartedAt: time.Now(), BeatAt: time.Now().Add(time.Hour), Interval: time.Hour,
		Config: map[string]string{shareSummary: shareScheme}}
	if err := st.Heartbeat(ctx, ghost); err != nil {
		t.Fatal(err)
	}
	h := &handled{byKey: map[string]map[string]bool{}}
	e := startShared(t, ctx, st, h, 100*time.Millisecond)
	waitUntil(t, 30*time.Second, "the replica takes half the queue", func() bool {
		return e.shares.cur.Load().Parts == 2
	})
	const keys, each = 20, 5
	publishKeys(t, ctx, e, keys, each)
	waitUntil(t, time.Minute, "every message handled, the ghost's share included", func() bool {
		return h.count() >= keys*each
	})
}

// waitUntil polls cond until it holds, or fails t naming what it waited
// for after within.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: not yet %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A replica that joins a running one knows its share when Start returns,
// before its consumers receive anything: its first batch is not the whole
// queue.
func TestSharesJoinBeforeTheFirstReceive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := sharedStore(t, "shares_"+fmt.Sprint(time.Now().UnixNano()))
	h := &handled{byKey: map[string]map[string]bool{}}
	a := startShared(t, ctx, st, h, time.Hour)
	if sh := a.shares.current(); sh.Parts != 1 {
		t.Fatalf("the first replica's share: %+v, want the whole queue", sh)
	}
	b := startShared(t, ctx, st, h, time.Hour)
	if sh := b.shares.current(); sh.Parts != 2 {
		t.Fatalf("a replica joining a running one: share %+v when Start returned, want one of 2", sh)
	}
}

// A replica with Limits receives through admission, from the whole
// queue: it takes no share, and its heartbeats do not say it takes one
// (the others would leave it a share it never reads first).
func TestSharesOffUnderLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := sharedStore(t, "shares_"+fmt.Sprint(time.Now().UnixNano()))
	e, err := NewEngine(st, st, &Config{Limits: []Limit{{Name: "api", MessageTypes: []string{"share.Msg"}, Concurrency: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Handle("share.Msg", func(context.Context, Envelope) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		_ = e.Stop(sctx)
	}()
	if e.shares != nil {
		t.Error("an engine receiving through admission takes a share")
	}
	waitUntil(t, 30*time.Second, "its heartbeat written", func() bool {
		rs, err := st.Replicas(ctx, 10)
		return err == nil && len(rs) == 1
	})
	rs, _ := st.Replicas(ctx, 10)
	if v, ok := rs[0].Config[shareSummary]; ok {
		t.Errorf("its heartbeat says %s: %q", shareSummary, v)
	}
}

// A replica whose consumers stop taking work (its one lane held by a
// handler that does not return) withdraws from the split at its next
// heartbeats, and the others take its share, though they never steal:
// its keys are not left waiting for the others to be idle.
func TestSharesStuckReplicaWithdraws(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := sharedStore(t, "shares_"+fmt.Sprint(time.Now().UnixNano()))
	stuck, err := NewEngine(st, st, &Config{BatchSize: 1, Lanes: 1, Consumers: 1, HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stuck.shares.steal = time.Hour
	release := make(chan struct{})
	took := make(chan string, 1)
	if err := stuck.Handle("share.Msg", func(ctx context.Context, env Envelope) error {
		select {
		case took <- env.ID:
		default:
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := stuck.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		_ = stuck.Stop(sctx)
	}()
	defer close(release) // before Stop, which waits for the handler
	h := &handled{byKey: map[string]map[string]bool{}}
	healthy := startShared(t, ctx, st, h, time.Hour)
	waitUntil(t, 30*time.Second, "both replicas take half the queue", func() bool {
		return stuck.shares.current().Parts == 2 && healthy.shares.current().Parts == 2
	})
	const keys, each = 20, 3
	publishKeys(t, ctx, healthy, keys, each)
	var held string
	select {
	case held = <-took:
	case <-ctx.Done():
		t.Fatal("the stuck replica took nothing of its share")
	}
	waitUntil(t, time.Minute, "every message but the one the stuck replica holds handled by the other", func() bool {
		return h.count() >= keys*each-1
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n != keys*each-1 {
		t.Errorf("the healthy replica handled %d messages, want all %d but %s", h.n, keys*each-1, held)
	}
}

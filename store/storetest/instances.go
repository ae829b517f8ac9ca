package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

func testInstanceRoundTrip(t *testing.T, s store.Store) {
	base := now()
	full := &store.Instance{
		SagaType:      "order",
		Key:           "o-1",
		State:         "Completed",
		Data:          []byte(`{"items":[{"sku":"a","qty":2}],"total":12.5,"note":"é ✓","ok":true,"none":null}`),
		SchemaVersion: 3,
		Version:       1,
		Timers:        map[string]string{"expire": "t-1", "remind": "t-2"},
		Attributes:    map[string]string{"supplier": "Müller & Söhne <script>", "region": "eu"},
		CreatedAt:     base.Add(-time.Hour),
		UpdatedAt:     base.Add(-time.Minute),
		FinishedAt:    base,
	}
	bare := &store.Instance{
		SagaType:  "order",
		Key:       "o-2",
		State:     "Started",
		Data:      []byte(`{}`),
		Version:   1,
		CreatedAt: base,
		UpdatedAt: base,
	}
	commit(t, s, &store.Changes{Inserts: []*store.Instance{full, bare}})

	res := load(t, s, &store.LoadParams{Keys: []store.Key{key("order", "o-1"), key("order", "o-2")}})
	if len(res.Instances) != 2 {
		t.Fatalf("load: got %d instances, want 2", len(res.Instances))
	}
	checkInstance(t, "full instance", res.Instances[key("order", "o-1")], full)
	checkInstance(t, "bare instance", res.Instances[key("order", "o-2")], bare)
	if got := res.Instances[key("order", "o-1")].Status(); got != store.StatusFinished {
		t.Errorf("full instance Status: got %q, want %q", got, store.StatusFinished)
	}
	if got := res.Instances[key("order", "o-2")].Status(); got != store.StatusActive {
		t.Errorf("bare instance Status: got %q, want %q", got, store.StatusActive)
	}
}

func testVersionAfterInsertAndUpdate(t *testing.T, s store.Store) {
	base := now()
	k := key("order", "o-1")
	commit(t, s, &store.Changes{Inserts: []*store.Instance{newInstance("order", "o-1", base)}})
	in := loadOne(t, s, k)
	if in == nil {
		t.Fatal("load after insert: got nil, want instance")
	}
	if in.Version != 1 {
		t.Fatalf("Version after insert: got %d, want 1", in.Version)
	}
	for want := int64(2); want <= 4; want++ {
		in.State = fmt.Sprintf("Step%d", want)
		in.Data = []byte(fmt.Sprintf(`{"n":%d}`, want))
		in.UpdatedAt = base.Add(time.Duration(want) * time.Second)
		in.Timers = map[string]string{"step": fmt.Sprintf("t-%d", want)}
		if want == 4 {
			in.FinishedAt = in.UpdatedAt
		}
		commit(t, s, &store.Changes{Updates: []*store.Instance{in}})
		expect := in.Clone()
		expect.Version = want
		in = loadOne(t, s, k)
		checkInstance(t, fmt.Sprintf("after update to version %d", want), in, expect)
		if in == nil {
			t.FailNow()
		}
	}
}

func testLoadReturnsFreshCopy(t *testing.T, s store.Store) {
	base := now()
	k := key("order", "o-1")
	want := newInstance("order", "o-1", base)
	commit(t, s, &store.Changes{Inserts: []*store.Instance{want.Clone()}})

	uow := begin(t, s)
	defer uow.Rollback(t.Context())
	p := &store.LoadParams{Keys: []store.Key{k}}
	first := loadIn(t, uow, p).Instances[k]
	second := loadIn(t, uow, p).Instances[k]
	if first == nil || second == nil {
		t.Fatalf("load: got %v and %v, want two instances", first, second)
	}
	if first == second {
		t.Fatal("two loads returned the same *Instance, want distinct copies")
	}
	first.State = "Mutated"
	first.Version = 42
	first.Data[0] = '['
	first.Data = append(first.Data, "garbage"...)
	first.Timers["expire"] = "mutated"
	first.Timers["extra"] = "x"
	first.FinishedAt = base

	checkInstance(t, "second load after mutating the first", second, want)
	checkInstance(t, "third load in the same unit of work", loadIn(t, uow, p).Instances[k], want)
	checkInstance(t, "load in another unit of work", loadOne(t, s, k), want)
}

func testLoadMissingIsNilNotError(t *testing.T, s store.Store) {
	base := now()
	commit(t, s, &store.Changes{Inserts: []*store.Instance{newInstance("order", "o-1", base)}})
	missing := []store.Key{key("order", "o-2"), key("invoice", "o-1"), key("", "")}
	res := load(t, s, &store.LoadParams{Keys: append([]store.Key{key("order", "o-1")}, missing...)})
	for _, k := range missing {
		in, ok := res.Instances[k]
		if ok || in != nil {
			t.Errorf("Instances[%s/%s]: got %v, present %v; want absent", k.SagaType, k.Key, in, ok)
		}
	}
	if res.Instances[key("order", "o-1")] == nil {
		t.Error("Instances[order/o-1]: got nil, want the instance loaded beside missing ones")
	}
	if n := len(res.Instances); n != 1 {
		t.Errorf("len(Instances): got %d, want 1", n)
	}
	empty := load(t, s, &store.LoadParams{})
	if len(empty.Instances) != 0 || len(empty.Seen) != 0 {
		t.Errorf("empty load: got %d instances and %d seen, want none", len(empty.Instances), len(empty.Seen))
	}
}

func testInsertExistingConflicts(t *testing.T, s store.Store) {
	base := now()
	k := key("order", "o-1")
	orig := newInstance("order", "o-1", base)
	commit(t, s, &store.Changes{Inserts: []*store.Instance{orig}})

	twin := newInstance("order", "o-1", base.Add(time.Second))
	twin.State = "Twin"
	err := tryCommit(t, s, &store.Changes{Inserts: []*store.Instance{twin}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("insert of existing key: got error %v, want one wrapping store.ErrConflict", err)
	}
	checkInstance(t, "instance after conflicting insert", loadOne(t, s, k), orig)

	// The same key in another saga type is another instance.
	commit(t, s, &store.Changes{Inserts: []*store.Instance{newInstance("invoice", "o-1", base)}})
}

func testUpdateStaleVersionConflicts(t *testing.T, s store.Store) {
	base := now()
	k := key("order", "o-1")
	commit(t, s, &store.Changes{Inserts: []*store.Instance{newInstance("order", "o-1", base)}})

	// Two units of work load version 1; the first update wins.
	uow1, uow2 := begin(t, s), begin(t, s)
	p := &store.LoadParams{Keys: []store.Key{k}}
	a, b := loadIn(t, uow1, p).Instances[k], loadIn(t, uow2, p).Instances[k]
	if a == nil || b == nil {
		t.Fatal("load: got nil, want instance")
	}
	a.State = "A"
	if err := uow1.Commit(t.Context(), &store.Changes{Updates: []*store.Instance{a}}); err != nil {
		t.Fatalf("first update: got error %v, want nil", err)
	}
	b.State = "B"
	err := uow2.Commit(t.Context(), &store.Changes{Updates: []*store.Instance{b}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update of stale version 1: got error %v, want one wrapping store.ErrConflict", err)
	}
	got := loadOne(t, s, k)
	if got == nil || got.State != "A" || got.Version != 2 {
		t.Fatalf("after stale update: got %+v, want state A at version 2", got)
	}

	// A version ahead of the stored one is as wrong as one behind.
	ahead := got.Clone()
	ahead.Version = 7
	ahead.State = "Ahead"
	if err := tryCommit(t, s, &store.Changes{Updates: []*store.Instance{ahead}}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update of version 7 over stored version 2: got error %v, want one wrapping store.ErrConflict", err)
	}
	if got := loadOne(t, s, k); got == nil || got.State != "A" || got.Version != 2 {
		t.Fatalf("after update with a future version: got %+v, want state A at version 2", got)
	}
}

func testUpdateMissingConflicts(t *testing.T, s store.Store) {
	base := now()
	ghost := newInstance("order", "ghost", base)
	err := tryCommit(t, s, &store.Changes{Updates: []*store.Instance{ghost}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update of missing instance: got error %v, want one wrapping store.ErrConflict", err)
	}
	if got := loadOne(t, s, key("order", "ghost")); got != nil {
		t.Fatalf("after update of missing instance: got %+v, want nil (an update must not insert)", got)
	}
}

func testConflictErrorIsErrConflict(t *testing.T, s store.Store) {
	base := now()
	commit(t, s, &store.Changes{Inserts: []*store.Instance{newInstance("order", "o-1", base)}})
	stale := newInstance("order", "o-1", base)
	stale.Version = 0
	cases := []struct {
		name string
		c    *store.Changes
	}{
		{"insert of existing key", &store.Changes{Inserts: []*store.Instance{newInstance("order", "o-1", base)}}},
		{"same key inserted twice in one commit", &store.Changes{Inserts: []*store.Instance{
			newInstance("order", "o-2", base), newInstance("order", "o-2", base),
		}}},
		{"update of stale version", &store.Changes{Updates: []*store.Instance{stale}}},
		{"update of missing instance", &store.Changes{Updates: []*store.Instance{newInstance("order", "o-3", base)}}},
	}
	for _, c := range cases {
		uow := begin(t, s)
		err := uow.Commit(t.Context(), c.c)
		if err == nil {
			t.Errorf("%s: got nil error, want one wrapping store.ErrConflict", c.name)
		} else if !errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: got error %v, errors.Is(err, store.ErrConflict) false; want true", c.name, err)
		}
		if err := uow.Rollback(t.Context()); err != nil {
			t.Errorf("%s: rollback after conflict: got error %v, want nil", c.name, err)
		}
	}
	if got := loadOne(t, s, key("order", "o-2")); got != nil {
		t.Errorf("after double insert: got %+v, want nil", got)
	}
	// A conflict does not poison the store.
	commit(t, s, &store.Changes{Inserts: []*store.Instance{newInstance("order", "o-4", base)}})
	if got := loadOne(t, s, key("order", "o-4")); got == nil {
		t.Error("insert after conflicts: got nil, want instance")
	}
}

func testCommitIsAllOrNothing(t *testing.T, s store.Store) {
	base := now()
	// Existing state: instances a and c, one timer on c, nothing else.
	existing := newInstance("order", "a", base)
	c := newInstance("order", "c", base)
	keep := timer("order", "c", "keep", "timer-keep", base.Add(-time.Minute))
	commit(t, s, &store.Changes{Inserts: []*store.Instance{existing, c}, Timers: []store.Timer{keep}})

	validUpdate := c.Clone()
	validUpdate.State = "Changed"
	stale := existing.Clone()
	stale.Version = 5
	variants := []struct {
		name    string
		inserts []*store.Instance
		updates []*store.Instance
	}{
		// The conflicting write comes last, after writes that are valid on
		// their own.
		{"ConflictingInsert", []*store.Instance{newInstance("order", "b", base), newInstance("order", "a", base)}, []*store.Instance{validUpdate}},
		{"StaleUpdate", []*store.Instance{newInstance("order", "b", base)}, []*store.Instance{validUpdate, stale}},
		{"MissingUpdate", []*store.Instance{newInstance("order", "b", base)}, []*store.Instance{validUpdate, newInstance("order", "missing", base)}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			ch := &store.Changes{
				Inserts:      v.inserts,
				Updates:      v.updates,
				Inbox:        []store.InboxEntry{{InboxKey: store.InboxKey{SagaType: "order", Key: "c", MessageID: "m-1"}, ProcessedAt: base}},
				Outbox:       []store.OutboxMessage{{Envelope: envelope("out-1", base), CreatedAt: base.Add(-time.Minute)}},
				Timers:       []store.Timer{timer("order", "c", "new", "timer-new", base.Add(-time.Minute))},
				CancelTimers: []store.TimerKey{{SagaType: "order", Key: "c", Name: "keep"}},
				Journal:      []store.JournalEntry{{SagaType: "order", Key: "c", MessageID: "m-1", EventType: "E", FromState: "Started", ToState: "Changed", Version: 2, At: base}},
				DeadLetters:  []store.DeadLetter{{ID: "dl-1", Envelope: envelope("dl-1", base), Reason: "test", FirstFailedAt: base, LastFailedAt: base}},
			}
			uow := begin(t, s)
			err := uow.Commit(t.Context(), ch)
			if !errors.Is(err, store.ErrConflict) {
				t.Fatalf("commit: got error %v, want one wrapping store.ErrConflict", err)
			}
			if err := uow.Rollback(t.Context()); err != nil {
				t.Errorf("rollback after failed commit: got error %v, want nil", err)
			}

			res := load(t, s, &store.LoadParams{
				Keys:  []store.Key{key("order", "a"), key("order", "b"), key("order", "c"), key("order", "missing")},
				Inbox: []store.InboxKey{{SagaType: "order", Key: "c", MessageID: "m-1"}},
			})
			checkInstance(t, "instance a", res.Instances[key("order", "a")], existing)
			checkInstance(t, "instance c (its valid update must be discarded)", res.Instances[key("order", "c")], c)
			if in := res.Instances[key("order", "b")]; in != nil {
				t.Errorf("inserted instance b: got %+v, want nil", in)
			}
			if in := res.Instances[key("order", "missing")]; in != nil {
				t.Errorf("instance missing: got %+v, want nil", in)
			}
			if res.Seen[store.InboxKey{SagaType: "order", Key: "c", MessageID: "m-1"}] {
				t.Error("inbox m-1: got seen, want not seen")
			}
			if n, oldest := backlog(t, s); n != 0 || !oldest.IsZero() {
				t.Errorf("outbox backlog: got %d, %v; want 0, zero time", n, oldest)
			}
			far := base.Add(24 * time.Hour)
			if ms := claimOutbox(t, s, store.ClaimParams{Now: far, Limit: 10, Lease: time.Minute, CreatedBefore: far}); len(ms) != 0 {
				t.Errorf("claim outbox: got %q, want none", outboxIDs(ms))
			}
			ts := listTimers(t, s)
			checkStrings(t, "timers (new one absent, cancelled one kept)", timerIDs(ts), []string{"timer-keep"})
			j, err := s.Journal(t.Context(), key("order", "c"))
			if err != nil {
				t.Fatalf("journal: got error %v, want nil", err)
			}
			if len(j) != 0 {
				t.Errorf("journal: got %d entries, want 0", len(j))
			}
			if d, err := s.GetDeadLetter(t.Context(), "dl-1"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("get dead letter dl-1: got %+v, %v; want an error wrapping store.ErrNotFound", d, err)
			}
			dls, err := s.ListDeadLetters(t.Context(), &store.ListParams{Limit: 10})
			if err != nil {
				t.Fatalf("list dead letters: got error %v, want nil", err)
			}
			if len(dls) != 0 {
				t.Errorf("list dead letters: got %d, want 0", len(dls))
			}
		})
	}
}

func testEmptyCommitSucceeds(t *testing.T, s store.Store) {
	commit(t, s, &store.Changes{})
	commit(t, s, nil)
	uow := begin(t, s)
	loadIn(t, uow, &store.LoadParams{Keys: []store.Key{key("order", "o-1")}})
	if err := uow.Commit(t.Context(), &store.Changes{}); err != nil {
		t.Fatalf("empty commit after load: got error %v, want nil", err)
	}
}

// counter is the saga data of the concurrency test.
type counter struct {
	N int `json:"n"`
}

func testConcurrentUnitsOfWorkNoLostUpdate(t *testing.T, s store.Store) {
	const workers, perWorker = 8, 50
	base := now()
	k := key("counter", "c-1")
	in := newInstance("counter", "c-1", base)
	in.Data = []byte(`{"n":0}`)
	commit(t, s, &store.Changes{Inserts: []*store.Instance{in}})

	ctx := t.Context()
	// increment adds one to the counter in its own unit of work, reloading
	// and retrying on conflict as the engine does.
	increment := func(msgID string) error {
		for attempt := 1; attempt <= 10000; attempt++ {
			uow, err := s.Begin(ctx)
			if err != nil {
				return fmt.Errorf("begin: %w", err)
			}
			ik := store.InboxKey{SagaType: k.SagaType, Key: k.Key, MessageID: msgID}
			res, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}, Inbox: []store.InboxKey{ik}})
			if err != nil {
				uow.Rollback(ctx)
				return fmt.Errorf("load: %w", err)
			}
			cur := res.Instances[k]
			if cur == nil || res.Seen[ik] {
				uow.Rollback(ctx)
				return fmt.Errorf("load: got instance %v and seen %v, want instance and not seen", cur, res.Seen[ik])
			}
			var c counter
			if err := json.Unmarshal(cur.Data, &c); err != nil {
				uow.Rollback(ctx)
				return fmt.Errorf("decode %s: %w", cur.Data, err)
			}
			c.N++
			cur.Data, _ = json.Marshal(c)
			err = uow.Commit(ctx, &store.Changes{
				Updates: []*store.Instance{cur},
				Inbox:   []store.InboxEntry{{InboxKey: ik, ProcessedAt: base}},
				Journal: []store.JournalEntry{{
					SagaType: k.SagaType, Key: k.Key, MessageID: msgID, EventType: "Inc",
					FromState: "Started", ToState: "Started", Version: cur.Version + 1, At: base,
				}},
			})
			uow.Rollback(ctx)
			if err == nil {
				return nil
			}
			if !errors.Is(err, store.ErrConflict) {
				return fmt.Errorf("commit: %w", err)
			}
			runtime.Gosched()
		}
		return errors.New("no success in 10000 attempts")
	}

	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				id := fmt.Sprintf("m-%d-%d", w, i)
				if err := increment(id); err != nil {
					t.Errorf("increment %s: %v", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	got := loadOne(t, s, k)
	if got == nil {
		t.Fatal("load: got nil, want counter")
	}
	var c counter
	if err := json.Unmarshal(got.Data, &c); err != nil {
		t.Fatalf("decode %s: %v", got.Data, err)
	}
	if c.N != workers*perWorker {
		t.Errorf("counter: got %d, want %d (lost updates)", c.N, workers*perWorker)
	}
	if got.Version != workers*perWorker+1 {
		t.Errorf("Version: got %d, want %d", got.Version, workers*perWorker+1)
	}

	j, err := s.Journal(ctx, k)
	if err != nil {
		t.Fatalf("journal: got error %v, want nil", err)
	}
	if len(j) != workers*perWorker {
		t.Errorf("journal: got %d entries, want %d (one per successful commit)", len(j), workers*perWorker)
	}
	for i, e := range j {
		if want := int64(i + 2); e.Version != want {
			t.Errorf("journal[%d].Version: got %d, want %d (commit order)", i, e.Version, want)
			break
		}
	}
	var iks []store.InboxKey
	for w := range workers {
		for i := range perWorker {
			iks = append(iks, store.InboxKey{SagaType: k.SagaType, Key: k.Key, MessageID: fmt.Sprintf("m-%d-%d", w, i)})
		}
	}
	res := load(t, s, &store.LoadParams{Inbox: iks})
	for _, ik := range iks {
		if !res.Seen[ik] {
			t.Errorf("inbox %s: got not seen, want seen", ik.MessageID)
		}
	}
}

func testConcurrentInsertsOneWins(t *testing.T, s store.Store) {
	const workers = 8
	base := now()
	k := key("order", "o-1")
	ctx := t.Context()

	var loaded, wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, workers)
	loaded.Add(workers)
	for w := range workers {
		wg.Go(func() {
			uow, err := s.Begin(ctx)
			if err != nil {
				loaded.Done()
				errs[w] = fmt.Errorf("begin: %w", err)
				return
			}
			defer uow.Rollback(ctx)
			res, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}})
			loaded.Done()
			if err != nil {
				errs[w] = fmt.Errorf("load: %w", err)
				return
			}
			if res.Instances[k] != nil {
				errs[w] = errors.New("load: got instance before any insert, want nil")
				return
			}
			<-start
			in := newInstance("order", "o-1", base)
			in.State = fmt.Sprintf("W%d", w)
			errs[w] = uow.Commit(ctx, &store.Changes{Inserts: []*store.Instance{in}})
		})
	}
	loaded.Wait()
	close(start)
	wg.Wait()

	winner := -1
	for w, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("worker %d: insert succeeded after worker %d did; want exactly one winner", w, winner)
		case err == nil:
			winner = w
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("worker %d: got error %v, want nil or one wrapping store.ErrConflict", w, err)
		}
	}
	if winner < 0 {
		t.Fatal("no insert succeeded, want exactly one")
	}
	got := loadOne(t, s, k)
	if want := fmt.Sprintf("W%d", winner); got == nil || got.State != want || got.Version != 1 {
		t.Errorf("instance: got %+v, want state %s at version 1", got, want)
	}
}

func testRollbackDiscards(t *testing.T, s store.Store) {
	base := now()
	ctx := t.Context()
	k := key("order", "o-1")
	commit(t, s, &store.Changes{Inserts: []*store.Instance{newInstance("order", "o-1", base)}})

	// A unit of work that loaded and rolled back holds nothing back.
	uow := begin(t, s)
	in := loadIn(t, uow, &store.LoadParams{Keys: []store.Key{k}}).Instances[k]
	if in == nil {
		t.Fatal("load: got nil, want instance")
	}
	if err := uow.Rollback(ctx); err != nil {
		t.Fatalf("rollback: got error %v, want nil", err)
	}
	if err := uow.Rollback(ctx); err != nil {
		t.Errorf("second rollback: got error %v, want nil", err)
	}

	// Commit on a rolled-back unit of work fails and writes nothing.
	in.State = "AfterRollback"
	err := uow.Commit(ctx, &store.Changes{
		Inserts: []*store.Instance{newInstance("order", "o-2", base)},
		Updates: []*store.Instance{in},
		Inbox:   []store.InboxEntry{{InboxKey: store.InboxKey{SagaType: "order", Key: "o-1", MessageID: "m-1"}, ProcessedAt: base}},
		Outbox:  []store.OutboxMessage{{Envelope: envelope("out-1", base), CreatedAt: base}},
	})
	if err == nil {
		t.Error("commit after rollback: got nil error, want an error")
	}
	if got := loadOne(t, s, k); got == nil || got.State != "Started" || got.Version != 1 {
		t.Errorf("instance after commit on rolled-back unit of work: got %+v, want state Started at version 1", got)
	}
	if got := loadOne(t, s, key("order", "o-2")); got != nil {
		t.Errorf("insert committed after rollback: got %+v, want nil", got)
	}
	if seen(t, s, store.InboxKey{SagaType: "order", Key: "o-1", MessageID: "m-1"}) {
		t.Error("inbox m-1 after commit on rolled-back unit of work: got seen, want not seen")
	}
	if n, _ := backlog(t, s); n != 0 {
		t.Errorf("outbox backlog after commit on rolled-back unit of work: got %d, want 0", n)
	}
	if _, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}}); err == nil {
		t.Error("load after rollback: got nil error, want an error")
	}

	// Another unit of work updates the instance the rolled-back one loaded.
	in.State = "Updated"
	commit(t, s, &store.Changes{Updates: []*store.Instance{in}})
	if got := loadOne(t, s, k); got == nil || got.State != "Updated" || got.Version != 2 {
		t.Errorf("after update: got %+v, want state Updated at version 2", got)
	}

	// Rollback of a unit of work that did nothing.
	if err := begin(t, s).Rollback(ctx); err != nil {
		t.Errorf("rollback of an unused unit of work: got error %v, want nil", err)
	}
}

func testRollbackAfterCommitNoop(t *testing.T, s store.Store) {
	base := now()
	ctx := t.Context()
	k := key("order", "o-1")
	want := newInstance("order", "o-1", base)

	uow := begin(t, s)
	loadIn(t, uow, &store.LoadParams{Keys: []store.Key{k}})
	if err := uow.Commit(ctx, &store.Changes{
		Inserts: []*store.Instance{want.Clone()},
		Inbox:   []store.InboxEntry{{InboxKey: store.InboxKey{SagaType: "order", Key: "o-1", MessageID: "m-1"}, ProcessedAt: base}},
	}); err != nil {
		t.Fatalf("commit: got error %v, want nil", err)
	}
	if err := uow.Rollback(ctx); err != nil {
		t.Errorf("rollback after commit: got error %v, want nil", err)
	}
	if err := uow.Rollback(ctx); err != nil {
		t.Errorf("second rollback after commit: got error %v, want nil", err)
	}
	checkInstance(t, "instance after commit and rollback", loadOne(t, s, k), want)
	if !seen(t, s, store.InboxKey{SagaType: "order", Key: "o-1", MessageID: "m-1"}) {
		t.Error("inbox m-1 after commit and rollback: got not seen, want seen")
	}

	// A second Commit on the finished unit of work fails and writes nothing.
	if err := uow.Commit(ctx, &store.Changes{Inserts: []*store.Instance{newInstance("order", "o-2", base)}}); err == nil {
		t.Error("second commit: got nil error, want an error")
	}
	if got := loadOne(t, s, key("order", "o-2")); got != nil {
		t.Errorf("instance from second commit: got %+v, want nil", got)
	}
}

func testFreshCopyOnLoadAfterCommit(t *testing.T, s store.Store) {
	base := now()
	k := key("order", "o-1")
	in := newInstance("order", "o-1", base)
	want := in.Clone()
	msg := store.OutboxMessage{Envelope: envelope("out-1", base), CreatedAt: base.Add(-time.Minute)}
	wantMsg := msg
	wantMsg.Envelope = msg.Envelope.Clone()
	tm := timer("order", "o-1", "expire", "timer-1", base.Add(-time.Minute))
	wantTimer := tm
	wantTimer.Envelope = tm.Envelope.Clone()
	dl := store.DeadLetter{ID: "dl-1", Envelope: envelope("dl-1", base), Reason: "r", Error: "e", Attempts: 1, FirstFailedAt: base, LastFailedAt: base}
	wantDL := dl
	wantDL.Envelope = dl.Envelope.Clone()

	ch := &store.Changes{
		Inserts:     []*store.Instance{in},
		Outbox:      []store.OutboxMessage{msg},
		Timers:      []store.Timer{tm},
		DeadLetters: []store.DeadLetter{dl},
	}
	commit(t, s, ch)

	// Mutate everything that was handed to Commit.
	in.State, in.Version = "Mutated", 9
	in.Data[0] = '['
	in.Timers["expire"] = "mutated"
	in.FinishedAt = base
	for _, e := range []*struct {
		h map[string]string
		b []byte
	}{{msg.Envelope.Headers, msg.Envelope.Body}, {tm.Envelope.Headers, tm.Envelope.Body}, {dl.Envelope.Headers, dl.Envelope.Body}} {
		e.h[transport.HeaderTraceParent] = "mutated"
		e.h["extra"] = "x"
		e.b[0] = 'X'
	}
	ch.Outbox[0].Envelope.ID = "mutated"
	ch.Timers[0].Name = "mutated"

	checkInstance(t, "instance after mutating the inserted one", loadOne(t, s, k), want)
	far := base.Add(time.Hour)
	ms := claimOutbox(t, s, store.ClaimParams{Now: far, Limit: 10, Lease: time.Minute, CreatedBefore: far})
	if len(ms) != 1 {
		t.Fatalf("claim outbox: got %q, want [out-1]", outboxIDs(ms))
	}
	checkEnvelope(t, "outbox message after mutating the committed one", ms[0].Envelope, wantMsg.Envelope)
	ts := listTimers(t, s)
	if len(ts) != 1 {
		t.Fatalf("timers: got %q, want [timer-1]", timerIDs(ts))
	}
	checkTimer(t, "timer after mutating the committed one", ts[0], wantTimer)
	gotDL, err := s.GetDeadLetter(t.Context(), "dl-1")
	if err != nil {
		t.Fatalf("get dead letter: got error %v, want nil", err)
	}
	checkDeadLetter(t, "dead letter after mutating the committed one", *gotDL, wantDL)

	// The same for an update.
	up := loadOne(t, s, k)
	up.State = "Updated"
	commit(t, s, &store.Changes{Updates: []*store.Instance{up}})
	wantUp := up.Clone()
	wantUp.Version = 2
	up.State = "Mutated"
	up.Data[0] = '['
	up.Timers["expire"] = "mutated"
	checkInstance(t, "instance after mutating the updated one", loadOne(t, s, k), wantUp)
}

func testReadsReturnFreshCopies(t *testing.T, s store.Store) {
	base := now()
	ctx := t.Context()
	k := key("order", "o-1")
	want := newInstance("order", "o-1", base)
	msg := store.OutboxMessage{Envelope: envelope("out-1", base), CreatedAt: base.Add(-time.Minute)}
	tm := timer("order", "o-1", "expire", "timer-1", base.Add(-time.Minute))
	dl := store.DeadLetter{ID: "dl-1", Envelope: envelope("dl-1", base), Reason: "r", Attempts: 1, FirstFailedAt: base, LastFailedAt: base}
	je := store.JournalEntry{SagaType: "order", Key: "o-1", MessageID: "m-1", EventType: "E", FromState: "A", ToState: "B", Version: 1, At: base}
	commit(t, s, &store.Changes{
		Inserts:     []*store.Instance{want.Clone()},
		Outbox:      []store.OutboxMessage{{Envelope: msg.Envelope.Clone(), CreatedAt: msg.CreatedAt}},
		Timers:      []store.Timer{{SagaType: tm.SagaType, Key: tm.Key, Name: tm.Name, DueAt: tm.DueAt, Envelope: tm.Envelope.Clone()}},
		DeadLetters: []store.DeadLetter{{ID: dl.ID, Envelope: dl.Envelope.Clone(), Reason: dl.Reason, Attempts: dl.Attempts, FirstFailedAt: dl.FirstFailedAt, LastFailedAt: dl.LastFailedAt}},
		Journal:     []store.JournalEntry{je},
	})
	mutate := func(e *transport.Envelope) {
		e.Headers[transport.HeaderTraceParent] = "mutated"
		e.Body[0] = 'X'
		e.ID = "mutated"
	}

	list, err := s.ListInstances(ctx, &store.ListParams{Limit: 10})
	if err != nil || len(list) != 1 {
		t.Fatalf("list instances: got %d, %v; want 1, nil", len(list), err)
	}
	list[0].State = "Mutated"
	list[0].Data[0] = '['
	list[0].Timers["expire"] = "mutated"
	checkInstance(t, "instance after mutating a listed one", loadOne(t, s, k), want)

	ms := claimOutbox(t, s, store.ClaimParams{Now: base, Limit: 10, Lease: shortLease, CreatedBefore: base})
	if len(ms) != 1 {
		t.Fatalf("claim outbox: got %q, want [out-1]", outboxIDs(ms))
	}
	mutate(&ms[0].Envelope)
	waitOut(shortLease)
	ms = claimOutbox(t, s, store.ClaimParams{Now: base.Add(time.Hour), Limit: 10, Lease: time.Minute, CreatedBefore: base})
	if len(ms) != 1 {
		t.Fatalf("reclaim outbox: got %q, want [out-1]", outboxIDs(ms))
	}
	checkEnvelope(t, "outbox message after mutating a claimed one", ms[0].Envelope, msg.Envelope)

	ts := claimTimers(t, s, store.ClaimParams{Now: base, Limit: 10, Lease: time.Minute})
	if len(ts) != 1 {
		t.Fatalf("claim timers: got %q, want [timer-1]", timerIDs(ts))
	}
	mutate(&ts[0].Envelope)
	ts = listTimers(t, s)
	if len(ts) != 1 {
		t.Fatalf("list timers: got %q, want [timer-1]", timerIDs(ts))
	}
	mutate(&ts[0].Envelope)
	ts = listTimers(t, s)
	if len(ts) != 1 {
		t.Fatalf("list timers: got %q, want [timer-1]", timerIDs(ts))
	}
	checkTimer(t, "timer after mutating claimed and listed ones", ts[0], tm)

	got, err := s.GetDeadLetter(ctx, "dl-1")
	if err != nil {
		t.Fatalf("get dead letter: got error %v, want nil", err)
	}
	mutate(&got.Envelope)
	dls, err := s.ListDeadLetters(ctx, &store.ListParams{Limit: 10})
	if err != nil || len(dls) != 1 {
		t.Fatalf("list dead letters: got %d, %v; want 1, nil", len(dls), err)
	}
	mutate(&dls[0].Envelope)
	got, err = s.GetDeadLetter(ctx, "dl-1")
	if err != nil {
		t.Fatalf("get dead letter: got error %v, want nil", err)
	}
	checkDeadLetter(t, "dead letter after mutating read ones", *got, dl)

	j, err := s.Journal(ctx, k)
	if err != nil || len(j) != 1 {
		t.Fatalf("journal: got %d entries, %v; want 1, nil", len(j), err)
	}
	j[0].ToState = "Mutated"
	j, err = s.Journal(ctx, k)
	if err != nil || len(j) != 1 {
		t.Fatalf("journal: got %d entries, %v; want 1, nil", len(j), err)
	}
	checkJournalEntry(t, "journal entry after mutating a read one", j[0], je)
}

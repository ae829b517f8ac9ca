package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

func testInboxSeenAfterCommit(t *testing.T, s store.Store) {
	base := now()
	k := key("order", "o-1")
	ik := store.InboxKey{SagaType: "order", Key: "o-1", MessageID: "m-1"}
	otherSaga := store.InboxKey{SagaType: "invoice", Key: "o-1", MessageID: "m-1"}
	otherKey := store.InboxKey{SagaType: "order", Key: "o-2", MessageID: "m-1"}
	otherMsg := store.InboxKey{SagaType: "order", Key: "o-1", MessageID: "m-2"}
	all := []store.InboxKey{ik, otherSaga, otherKey, otherMsg}

	res := load(t, s, &store.LoadParams{Inbox: all})
	for _, x := range all {
		if res.Seen[x] {
			t.Errorf("before commit: inbox %+v: got seen, want not seen", x)
		}
	}

	commit(t, s, &store.Changes{
		Inserts: []*store.Instance{newInstance("order", "o-1", base)},
		Inbox:   []store.InboxEntry{{InboxKey: ik, ProcessedAt: base}},
	})

	res = load(t, s, &store.LoadParams{Keys: []store.Key{k}, Inbox: all})
	if !res.Seen[ik] {
		t.Errorf("after commit: inbox %+v: got not seen, want seen", ik)
	}
	for _, x := range all[1:] {
		if res.Seen[x] {
			t.Errorf("after commit: inbox %+v: got seen, want not seen (records are per saga instance and message)", x)
		}
	}
	if res.Instances[k] == nil {
		t.Error("after commit: instance loaded with the inbox: got nil, want instance")
	}

	// A record needs no instance (a message deliberately skipped).
	lone := store.InboxKey{SagaType: "order", Key: "none", MessageID: "m-9"}
	commit(t, s, &store.Changes{Inbox: []store.InboxEntry{{InboxKey: lone, ProcessedAt: base}}})
	if !seen(t, s, lone) {
		t.Errorf("inbox %+v without instance: got not seen, want seen", lone)
	}
}

func testInboxDuplicateRecordIgnored(t *testing.T, s store.Store) {
	base := now()
	ik := store.InboxKey{SagaType: "order", Key: "o-1", MessageID: "m-1"}
	entry := store.InboxEntry{InboxKey: ik, ProcessedAt: base}
	commit(t, s, &store.Changes{Inbox: []store.InboxEntry{entry}})

	later := store.InboxEntry{InboxKey: ik, ProcessedAt: base.Add(time.Minute)}
	if err := tryCommit(t, s, &store.Changes{Inbox: []store.InboxEntry{later}}); err != nil {
		t.Fatalf("commit of an existing inbox record: got error %v, want nil", err)
	}
	other := store.InboxEntry{InboxKey: store.InboxKey{SagaType: "order", Key: "o-1", MessageID: "m-2"}, ProcessedAt: base}
	if err := tryCommit(t, s, &store.Changes{
		Inserts: []*store.Instance{newInstance("order", "o-1", base)},
		Inbox:   []store.InboxEntry{entry, other, other},
	}); err != nil {
		t.Fatalf("commit with an existing and a repeated inbox record: got error %v, want nil", err)
	}
	res := load(t, s, &store.LoadParams{Keys: []store.Key{key("order", "o-1")}, Inbox: []store.InboxKey{ik, other.InboxKey}})
	if !res.Seen[ik] || !res.Seen[other.InboxKey] {
		t.Errorf("inbox: got seen %v, want both records seen", res.Seen)
	}
	if res.Instances[key("order", "o-1")] == nil {
		t.Error("instance committed beside duplicate inbox records: got nil, want instance")
	}
}

func testOutboxClaimAndMarkSent(t *testing.T, s store.Store) {
	base := now()
	out := func(id string, created time.Time) store.OutboxMessage {
		return store.OutboxMessage{Envelope: envelope(id, base), CreatedAt: created}
	}
	msgs := []store.OutboxMessage{
		out("o-1", base.Add(-3*time.Second)),
		out("o-2", base.Add(-2*time.Second)),
		out("o-3", base.Add(-time.Second)),
		out("o-4", base.Add(10*time.Second)), // fresh: left to the committing engine
	}
	commit(t, s, &store.Changes{Outbox: msgs[:2]})
	commit(t, s, &store.Changes{Outbox: msgs[2:]})
	lease := shortLease

	got := claimOutbox(t, s, store.ClaimParams{Now: base, Limit: 10, Lease: lease, CreatedBefore: base})
	checkStrings(t, "first claim (created before CreatedBefore)", outboxIDs(got), []string{"o-1", "o-2", "o-3"})
	for _, m := range got {
		i := slices.IndexFunc(msgs, func(x store.OutboxMessage) bool { return x.Envelope.ID == m.Envelope.ID })
		if i < 0 {
			continue
		}
		checkEnvelope(t, "claimed "+m.Envelope.ID, m.Envelope, msgs[i].Envelope)
		if !m.CreatedAt.Equal(msgs[i].CreatedAt) {
			t.Errorf("claimed %s: CreatedAt: got %v, want %v", m.Envelope.ID, m.CreatedAt, msgs[i].CreatedAt)
		}
		if !m.SentAt.IsZero() {
			t.Errorf("claimed %s: SentAt: got %v, want zero", m.Envelope.ID, m.SentAt)
		}
	}

	// Within the lease, claimed messages are not handed out again; the fresh
	// one is, once CreatedBefore passes it.
	got = claimOutbox(t, s, store.ClaimParams{Now: base.Add(lease / 2), Limit: 10, Lease: lease, CreatedBefore: base.Add(time.Hour)})
	checkStrings(t, "claim within the lease", outboxIDs(got), []string{"o-4"})
	got = claimOutbox(t, s, store.ClaimParams{Now: base.Add(lease - time.Millisecond), Limit: 10, Lease: lease, CreatedBefore: base.Add(time.Hour)})
	checkStrings(t, "claim just before the leases end", outboxIDs(got), nil)
	waitOut(lease)

	// A sent message is never claimed again.
	markSent(t, s, base.Add(31*time.Second), "o-1")
	if n, oldest := backlog(t, s); n != 3 || !oldest.Equal(msgs[1].CreatedAt) {
		t.Errorf("backlog after sending o-1: got %d, %v; want 3, %v", n, oldest, msgs[1].CreatedAt)
	}

	// After the leases end, the unsent messages are claimed again, no more
	// than Limit at a time.
	now2 := base.Add(2 * time.Minute)
	first := claimOutbox(t, s, store.ClaimParams{Now: now2, Limit: 2, Lease: lease, CreatedBefore: base.Add(time.Hour)})
	if len(first) != 2 {
		t.Fatalf("claim after lease expiry with Limit 2: got %q, want 2 of [o-2 o-3 o-4]", outboxIDs(first))
	}
	rest := claimOutbox(t, s, store.ClaimParams{Now: now2, Limit: 2, Lease: lease, CreatedBefore: base.Add(time.Hour)})
	checkStrings(t, "claims after lease expiry", outboxIDs(append(first, rest...)), []string{"o-2", "o-3", "o-4"})

	markSent(t, s, now2, "o-2", "o-3", "o-4", "no-such-id")
	got = claimOutbox(t, s, store.ClaimParams{Now: base.Add(time.Hour), Limit: 10, Lease: lease, CreatedBefore: base.Add(time.Hour)})
	checkStrings(t, "claim after all were sent", outboxIDs(got), nil)
	if n, oldest := backlog(t, s); n != 0 || !oldest.IsZero() {
		t.Errorf("backlog after all were sent: got %d, %v; want 0, zero time", n, oldest)
	}

	// Marking sent needs no claim (the engine's fast path after commit).
	commit(t, s, &store.Changes{Outbox: []store.OutboxMessage{out("o-5", base)}})
	markSent(t, s, base, "o-5")
	got = claimOutbox(t, s, store.ClaimParams{Now: base.Add(time.Hour), Limit: 10, Lease: lease, CreatedBefore: base.Add(time.Hour)})
	checkStrings(t, "claim after marking an unclaimed message sent", outboxIDs(got), nil)
}

func testOutboxBacklog(t *testing.T, s store.Store) {
	base := now()
	if n, oldest := backlog(t, s); n != 0 || !oldest.IsZero() {
		t.Errorf("empty backlog: got %d, %v; want 0, zero time", n, oldest)
	}
	commit(t, s, &store.Changes{Outbox: []store.OutboxMessage{
		{Envelope: envelope("o-1", base), CreatedAt: base.Add(-time.Second)},
		{Envelope: envelope("o-2", base), CreatedAt: base.Add(-3 * time.Second)},
		{Envelope: envelope("o-3", base), CreatedAt: base.Add(-2 * time.Second)},
	}})
	if n, oldest := backlog(t, s); n != 3 || !oldest.Equal(base.Add(-3*time.Second)) {
		t.Errorf("backlog: got %d, %v; want 3, %v", n, oldest, base.Add(-3*time.Second))
	}
	// Claiming does not change the backlog; sending does.
	claimOutbox(t, s, store.ClaimParams{Now: base, Limit: 10, Lease: time.Minute, CreatedBefore: base})
	if n, _ := backlog(t, s); n != 3 {
		t.Errorf("backlog after claim: got %d, want 3", n)
	}
	markSent(t, s, base, "o-2")
	if n, oldest := backlog(t, s); n != 2 || !oldest.Equal(base.Add(-2*time.Second)) {
		t.Errorf("backlog after sending the oldest: got %d, %v; want 2, %v", n, oldest, base.Add(-2*time.Second))
	}
	markSent(t, s, base, "o-1", "o-3")
	if n, oldest := backlog(t, s); n != 0 || !oldest.IsZero() {
		t.Errorf("backlog after sending all: got %d, %v; want 0, zero time", n, oldest)
	}
}

func testTimersReplaceByName(t *testing.T, s store.Store) {
	base := now()
	commit(t, s, &store.Changes{Timers: []store.Timer{
		timer("order", "o-1", "expire", "t-1", base.Add(time.Hour)),
		timer("order", "o-2", "expire", "t-other-key", base.Add(time.Hour)),
		timer("invoice", "o-1", "expire", "t-other-saga", base.Add(time.Hour)),
	}})
	replacement := timer("order", "o-1", "expire", "t-2", base.Add(-time.Minute))
	commit(t, s, &store.Changes{Timers: []store.Timer{replacement}})

	ts := listTimers(t, s)
	checkStrings(t, "timers after replacing order/o-1/expire", timerIDs(ts), []string{"t-2", "t-other-key", "t-other-saga"})
	for _, tm := range ts {
		if tm.Envelope.ID == "t-2" {
			checkTimer(t, "replaced timer", tm, replacement)
		}
	}

	got := claimTimers(t, s, store.ClaimParams{Now: base, Limit: 10, Lease: time.Minute})
	checkStrings(t, "claim after replacement", timerIDs(got), []string{"t-2"})

	// Replacing a claimed timer replaces its lease too: the new timer is
	// claimable as soon as it is due.
	commit(t, s, &store.Changes{Timers: []store.Timer{timer("order", "o-1", "expire", "t-3", base.Add(-time.Second))}})
	got = claimTimers(t, s, store.ClaimParams{Now: base.Add(time.Second), Limit: 10, Lease: time.Minute})
	checkStrings(t, "claim of a timer replaced while leased", timerIDs(got), []string{"t-3"})
}

func testTimersCancel(t *testing.T, s store.Store) {
	base := now()
	due := base.Add(-time.Minute)
	commit(t, s, &store.Changes{Timers: []store.Timer{
		timer("order", "o-1", "expire", "t-1", due),
		timer("order", "o-1", "remind", "t-2", due),
		timer("order", "o-2", "expire", "t-3", due),
	}})
	err := tryCommit(t, s, &store.Changes{CancelTimers: []store.TimerKey{
		{SagaType: "order", Key: "o-1", Name: "expire"},
		{SagaType: "order", Key: "o-1", Name: "no-such-timer"},
		{SagaType: "order", Key: "o-9", Name: "expire"},
	}})
	if err != nil {
		t.Fatalf("commit cancelling present and missing timers: got error %v, want nil", err)
	}
	checkStrings(t, "timers after cancel", timerIDs(listTimers(t, s)), []string{"t-2", "t-3"})
	got := claimTimers(t, s, store.ClaimParams{Now: base.Add(time.Hour), Limit: 10, Lease: shortLease})
	checkStrings(t, "claim after cancel", timerIDs(got), []string{"t-2", "t-3"})

	// A claimed timer can be cancelled too.
	commit(t, s, &store.Changes{CancelTimers: []store.TimerKey{{SagaType: "order", Key: "o-2", Name: "expire"}}})
	checkStrings(t, "timers after cancelling a claimed one", timerIDs(listTimers(t, s)), []string{"t-2"})
	waitOut(shortLease)
	got = claimTimers(t, s, store.ClaimParams{Now: base.Add(24 * time.Hour), Limit: 10, Lease: time.Minute})
	checkStrings(t, "claim after the leases end", timerIDs(got), []string{"t-2"})
}

func testClaimDueTimers(t *testing.T, s store.Store) {
	base := now()
	timers := []store.Timer{
		timer("order", "o-1", "a", "t-1", base.Add(-time.Minute)),
		timer("order", "o-2", "a", "t-2", base), // due exactly at Now
		timer("order", "o-3", "a", "t-3", base.Add(time.Minute)),
		timer("order", "o-4", "a", "t-4", base.Add(time.Hour)),
	}
	commit(t, s, &store.Changes{Timers: timers})
	lease := shortLease

	got := claimTimers(t, s, store.ClaimParams{Now: base, Limit: 10, Lease: lease})
	checkStrings(t, "claim at base", timerIDs(got), []string{"t-1", "t-2"})
	for _, tm := range got {
		i := slices.IndexFunc(timers, func(x store.Timer) bool { return x.Envelope.ID == tm.Envelope.ID })
		if i >= 0 {
			checkTimer(t, "claimed "+tm.Envelope.ID, tm, timers[i])
		}
	}
	got = claimTimers(t, s, store.ClaimParams{Now: base.Add(lease / 2), Limit: 10, Lease: lease})
	checkStrings(t, "claim within the lease", timerIDs(got), nil)

	// Leases end Lease after the claim; t-3 is due by then.
	waitOut(lease)
	got = claimTimers(t, s, store.ClaimParams{Now: base.Add(90 * time.Second), Limit: 10, Lease: lease})
	checkStrings(t, "claim after lease expiry", timerIDs(got), []string{"t-1", "t-2", "t-3"})
	waitOut(lease)

	// Limit bounds each claim; claims never overlap while leased.
	now2 := base.Add(2 * time.Hour)
	first := claimTimers(t, s, store.ClaimParams{Now: now2, Limit: 3, Lease: lease})
	if len(first) != 3 {
		t.Fatalf("claim with Limit 3: got %q, want 3 timers", timerIDs(first))
	}
	rest := claimTimers(t, s, store.ClaimParams{Now: now2, Limit: 3, Lease: lease})
	checkStrings(t, "two claims with Limit 3", timerIDs(append(first, rest...)), []string{"t-1", "t-2", "t-3", "t-4"})

	// Claimed timers stay until deleted.
	checkStrings(t, "timers after claims", timerIDs(listTimers(t, s)), []string{"t-1", "t-2", "t-3", "t-4"})
}

func testDeleteTimersKeepsRescheduled(t *testing.T, s store.Store) {
	base := now()
	commit(t, s, &store.Changes{Timers: []store.Timer{
		timer("order", "o-1", "expire", "t-1", base.Add(-time.Minute)),
		timer("order", "o-1", "remind", "t-2", base.Add(-time.Minute)),
	}})
	fired := claimTimers(t, s, store.ClaimParams{Now: base, Limit: 10, Lease: time.Minute})
	checkStrings(t, "claim", timerIDs(fired), []string{"t-1", "t-2"})

	// While t-1 was firing, the saga rescheduled "expire".
	commit(t, s, &store.Changes{Timers: []store.Timer{timer("order", "o-1", "expire", "t-3", base.Add(time.Hour))}})
	if err := s.DeleteTimers(t.Context(), fired); err != nil {
		t.Fatalf("delete timers: got error %v, want nil", err)
	}
	ts := listTimers(t, s)
	checkStrings(t, "timers after deleting the fired ones", timerIDs(ts), []string{"t-3"})
	if len(ts) == 1 {
		checkTimer(t, "rescheduled timer", ts[0], timer("order", "o-1", "expire", "t-3", base.Add(time.Hour)))
	}

	// Deleting again, or deleting missing timers, is not an error.
	if err := s.DeleteTimers(t.Context(), append(fired, timer("order", "o-9", "x", "t-9", base))); err != nil {
		t.Fatalf("delete missing timers: got error %v, want nil", err)
	}
	if err := s.DeleteTimers(t.Context(), ts); err != nil {
		t.Fatalf("delete timers: got error %v, want nil", err)
	}
	checkStrings(t, "timers after deleting the rescheduled one", timerIDs(listTimers(t, s)), nil)
}

func testListTimers(t *testing.T, s store.Store) {
	base := now()
	commit(t, s, &store.Changes{Timers: []store.Timer{
		timer("order", "o-3", "a", "t-3", base.Add(3*time.Minute)),
		timer("invoice", "o-1", "a", "t-2", base.Add(2*time.Minute)),
		timer("order", "o-1", "a", "t-1", base.Add(time.Minute)),
		timer("order", "o-4", "a", "t-4", base.Add(4*time.Minute)),
	}})
	ids := func(ts []store.Timer) []string {
		out := make([]string, len(ts))
		for i, tm := range ts {
			out[i] = tm.Envelope.ID
		}
		return out
	}
	ts, err := s.ListTimers(t.Context(), &store.ListParams{Limit: 10})
	if err != nil {
		t.Fatalf("list timers: got error %v, want nil", err)
	}
	checkStrings(t, "timers by due time", ids(ts), []string{"t-1", "t-2", "t-3", "t-4"})
	ts, err = s.ListTimers(t.Context(), &store.ListParams{Limit: 2})
	if err != nil {
		t.Fatalf("list timers: got error %v, want nil", err)
	}
	checkStrings(t, "timers with Limit 2", ids(ts), []string{"t-1", "t-2"})
	ts, err = s.ListTimers(t.Context(), &store.ListParams{SagaType: "order", Limit: 10})
	if err != nil {
		t.Fatalf("list timers: got error %v, want nil", err)
	}
	checkStrings(t, "timers of saga type order", ids(ts), []string{"t-1", "t-3", "t-4"})
}

func testSweepDeletesFinishedInBoundedBatches(t *testing.T, s store.Store) {
	base := now()
	ctx := t.Context()
	retention := base.Add(-7 * 24 * time.Hour)
	old := base.Add(-10 * 24 * time.Hour)
	var ins []*store.Instance
	var inbox []store.InboxEntry
	var timers []store.Timer
	add := func(sagaType, k string, finished time.Time) {
		in := newInstance(sagaType, k, old)
		in.FinishedAt = finished
		ins = append(ins, in)
		inbox = append(inbox, store.InboxEntry{InboxKey: store.InboxKey{SagaType: sagaType, Key: k, MessageID: "m-" + k}, ProcessedAt: old})
		timers = append(timers, timer(sagaType, k, "expire", "t-"+sagaType+"-"+k, base.Add(-time.Minute)))
	}
	for i, k := range []string{"f-1", "f-2", "f-3", "f-4", "f-5"} {
		add("order", k, old.Add(time.Duration(i)*time.Minute))
	}
	add("invoice", "f-6", old)
	add("order", "recent", base.Add(-time.Hour))
	add("order", "active", time.Time{})
	commit(t, s, &store.Changes{Inserts: ins, Inbox: inbox, Timers: timers})

	// Zero FinishedBefore deletes no instance.
	res, err := s.Sweep(ctx, &store.SweepParams{Limit: 10})
	if err != nil {
		t.Fatalf("sweep with zero FinishedBefore: got error %v, want nil", err)
	}
	if res == nil || res.Instances != 0 {
		t.Fatalf("sweep with zero FinishedBefore: got %+v, want 0 instances", res)
	}

	const limit = 4
	total := 0
	for call := 1; ; call++ {
		res, err := s.Sweep(ctx, &store.SweepParams{FinishedBefore: retention, Limit: limit})
		if err != nil {
			t.Fatalf("sweep %d: got error %v, want nil", call, err)
		}
		if res == nil {
			t.Fatalf("sweep %d: got nil result, want non-nil", call)
		}
		if res.Instances < 0 || res.Instances > limit {
			t.Fatalf("sweep %d: got %d instances, want at most Limit %d", call, res.Instances, limit)
		}
		if call == 1 && res.Instances == 0 {
			t.Fatal("sweep 1: got 0 instances, want some")
		}
		if res.Instances == 0 {
			break
		}
		total += res.Instances
		if call > 6 {
			t.Fatalf("sweep: still deleting after %d calls (%d instances)", call, total)
		}
	}
	if total != 6 {
		t.Errorf("sweep: got %d instances deleted in total, want 6", total)
	}

	var keys []store.Key
	var iks []store.InboxKey
	for _, e := range inbox {
		keys = append(keys, key(e.SagaType, e.Key))
		iks = append(iks, e.InboxKey)
	}
	loaded := load(t, s, &store.LoadParams{Keys: keys, Inbox: iks})
	for i, k := range keys {
		kept := k.Key == "recent" || k.Key == "active"
		if got := loaded.Instances[k] != nil; got != kept {
			t.Errorf("instance %s/%s present: got %v, want %v", k.SagaType, k.Key, got, kept)
		}
		if got := loaded.Seen[iks[i]]; got != kept {
			t.Errorf("inbox %s/%s/%s seen: got %v, want %v", k.SagaType, k.Key, iks[i].MessageID, got, kept)
		}
	}
	checkStrings(t, "timers after sweep", timerIDs(listTimers(t, s)), []string{"t-order-active", "t-order-recent"})
	got := claimTimers(t, s, store.ClaimParams{Now: base, Limit: 10, Lease: time.Minute})
	checkStrings(t, "claim timers after sweep", timerIDs(got), []string{"t-order-active", "t-order-recent"})
}

func testSweepDeletesJournalOfSweptInstances(t *testing.T, s store.Store) {
	base := now()
	ctx := t.Context()
	old := base.Add(-10 * 24 * time.Hour)
	done := newInstance("order", "done", old)
	done.FinishedAt = old
	active := newInstance("order", "active", old)
	j := func(k string) store.JournalEntry {
		return store.JournalEntry{SagaType: "order", Key: k, MessageID: "m-" + k, EventType: "orders.Placed", FromState: "Initial", ToState: "Open", Version: 1, At: old}
	}
	commit(t, s, &store.Changes{Inserts: []*store.Instance{done, active}, Journal: []store.JournalEntry{j("done"), j("active")}})
	if _, err := s.Sweep(ctx, &store.SweepParams{FinishedBefore: base, Limit: 10}); err != nil {
		t.Fatalf("sweep: got error %v, want nil", err)
	}
	for k, want := range map[string]int{"done": 0, "active": 1} {
		got, err := s.Journal(ctx, key("order", k))
		if err != nil || len(got) != want {
			t.Errorf("journal of %s after sweep: got %d entries (err %v), want %d", k, len(got), err, want)
		}
	}
}

func testSweepDeletesOrphanInboxInBoundedBatches(t *testing.T, s store.Store) {
	base := now()
	ctx := t.Context()
	old := base.Add(-10 * 24 * time.Hour)
	live := newInstance("order", "live", old)
	var inbox []store.InboxEntry
	entry := func(sagaType, k, id string, at time.Time) store.InboxEntry {
		e := store.InboxEntry{InboxKey: store.InboxKey{SagaType: sagaType, Key: k, MessageID: id}, ProcessedAt: at}
		inbox = append(inbox, e)
		return e
	}
	var oldOrphans []store.InboxKey
	for i := range 5 {
		oldOrphans = append(oldOrphans, entry("idem.handler", "orders.Ship", fmt.Sprintf("old-%d", i), old).InboxKey)
	}
	recent := entry("idem.handler", "orders.Ship", "recent", base).InboxKey
	ofLive := entry("order", "live", "m-live", old).InboxKey
	commit(t, s, &store.Changes{Inserts: []*store.Instance{live}, Inbox: inbox})

	const limit = 2
	total := 0
	for call := 1; call <= 10; call++ {
		res, err := s.Sweep(ctx, &store.SweepParams{InboxBefore: base.Add(-time.Hour), Limit: limit})
		if err != nil {
			t.Fatalf("sweep %d: got error %v, want nil", call, err)
		}
		if res.Inbox > limit {
			t.Fatalf("sweep %d: got %d inbox records, want at most Limit %d", call, res.Inbox, limit)
		}
		if res.Inbox == 0 {
			break
		}
		total += res.Inbox
	}
	if total != len(oldOrphans) {
		t.Errorf("orphan inbox records swept: got %d, want %d", total, len(oldOrphans))
	}
	seen := load(t, s, &store.LoadParams{Inbox: append([]store.InboxKey{recent, ofLive}, oldOrphans...)}).Seen
	if !seen[recent] || !seen[ofLive] {
		t.Errorf("sweep removed a recent orphan (%v) or a live instance's record (%v); want both kept", seen[recent], seen[ofLive])
	}
	for _, k := range oldOrphans {
		if seen[k] {
			t.Errorf("old orphan inbox record %s still present", k.MessageID)
		}
	}
}

func testSweepDeletesSentOutbox(t *testing.T, s store.Store) {
	base := now()
	ctx := t.Context()
	var msgs []store.OutboxMessage
	for _, id := range []string{"s-1", "s-2", "s-3", "s-4", "s-5", "recent", "unsent"} {
		msgs = append(msgs, store.OutboxMessage{Envelope: envelope(id, base), CreatedAt: base.Add(-48 * time.Hour)})
	}
	finished := newInstance("order", "o-1", base.Add(-48*time.Hour))
	finished.FinishedAt = base.Add(-48 * time.Hour)
	commit(t, s, &store.Changes{Outbox: msgs, Inserts: []*store.Instance{finished}})
	markSent(t, s, base.Add(-time.Hour), "s-1", "s-2", "s-3", "s-4", "s-5")
	markSent(t, s, base, "recent")

	// Zero SentBefore deletes no outbox row.
	res, err := s.Sweep(ctx, &store.SweepParams{Limit: 10})
	if err != nil {
		t.Fatalf("sweep with zero SentBefore: got error %v, want nil", err)
	}
	if res == nil || res.Outbox != 0 {
		t.Fatalf("sweep with zero SentBefore: got %+v, want 0 outbox rows", res)
	}

	const limit = 2
	total := 0
	for call := 1; ; call++ {
		// Zero FinishedBefore: the finished instance stays.
		res, err := s.Sweep(ctx, &store.SweepParams{SentBefore: base.Add(-time.Minute), Limit: limit})
		if err != nil {
			t.Fatalf("sweep %d: got error %v, want nil", call, err)
		}
		if res == nil {
			t.Fatalf("sweep %d: got nil result, want non-nil", call)
		}
		if res.Outbox < 0 || res.Outbox > limit {
			t.Fatalf("sweep %d: got %d outbox rows, want at most Limit %d", call, res.Outbox, limit)
		}
		if call == 1 && res.Outbox == 0 {
			t.Fatal("sweep 1: got 0 outbox rows, want some")
		}
		if res.Instances != 0 {
			t.Errorf("sweep %d: got %d instances, want 0 (FinishedBefore is zero)", call, res.Instances)
		}
		if res.Outbox == 0 {
			break
		}
		total += res.Outbox
		if call > 6 {
			t.Fatalf("sweep: still deleting after %d calls (%d rows)", call, total)
		}
	}
	if total != 5 {
		t.Errorf("sweep: got %d outbox rows deleted in total, want 5 (sent before SentBefore)", total)
	}
	if n, oldest := backlog(t, s); n != 1 || !oldest.Equal(base.Add(-48*time.Hour)) {
		t.Errorf("backlog after sweep: got %d, %v; want 1, %v", n, oldest, base.Add(-48*time.Hour))
	}
	got := claimOutbox(t, s, store.ClaimParams{Now: base, Limit: 10, Lease: time.Minute, CreatedBefore: base})
	checkStrings(t, "claim after sweep", outboxIDs(got), []string{"unsent"})
	if loadOne(t, s, key("order", "o-1")) == nil {
		t.Error("finished instance after outbox sweep: got nil, want instance")
	}
	// The recent row goes once SentBefore passes it.
	res, err = s.Sweep(ctx, &store.SweepParams{SentBefore: base.Add(time.Minute), Limit: limit})
	if err != nil {
		t.Fatalf("sweep past the recent row: got error %v, want nil", err)
	}
	if res == nil || res.Outbox != 1 {
		t.Errorf("sweep past the recent row: got %+v, want 1 outbox row", res)
	}
}

func testOutboxRepeatedInOneCommit(t *testing.T, s store.Store) {
	base := now()
	first := store.OutboxMessage{Envelope: envelope("o-1", base), CreatedAt: base.Add(-time.Minute)}
	second := store.OutboxMessage{Envelope: envelope("o-1", base), CreatedAt: base.Add(-2 * time.Minute)}
	second.Envelope.Type = "test.Second"
	second.Envelope.Body = []byte(`{"second":true}`)
	other := store.OutboxMessage{Envelope: envelope("o-2", base), CreatedAt: base.Add(-time.Minute)}
	if err := tryCommit(t, s, &store.Changes{Outbox: []store.OutboxMessage{first, other, second}}); err != nil {
		t.Fatalf("commit of two outbox messages with one ID: got error %v, want nil (the first is kept)", err)
	}
	if n, oldest := backlog(t, s); n != 2 || !oldest.Equal(first.CreatedAt) {
		t.Errorf("backlog: got %d, %v; want 2, %v (one message per ID, the first)", n, oldest, first.CreatedAt)
	}
	got := claimOutbox(t, s, store.ClaimParams{Now: base, Limit: 10, Lease: time.Minute, CreatedBefore: base})
	checkStrings(t, "claimed", outboxIDs(got), []string{"o-1", "o-2"})
	for _, m := range got {
		if m.Envelope.ID == "o-1" {
			checkEnvelope(t, "o-1 (the first of the commit)", m.Envelope, first.Envelope)
		}
	}
}

func testTimersRepeatedInOneCommit(t *testing.T, s store.Store) {
	base := now()
	first := timer("order", "o-1", "expire", "t-1", base.Add(time.Hour))
	second := timer("order", "o-1", "expire", "t-2", base.Add(-time.Minute))
	other := timer("order", "o-1", "remind", "t-3", base.Add(time.Hour))
	if err := tryCommit(t, s, &store.Changes{Timers: []store.Timer{first, other, second}}); err != nil {
		t.Fatalf("commit scheduling one timer name twice: got error %v, want nil (the later replaces the earlier)", err)
	}
	ts := listTimers(t, s)
	checkStrings(t, "timers", timerIDs(ts), []string{"t-2", "t-3"})
	for _, tm := range ts {
		if tm.Envelope.ID == "t-2" {
			checkTimer(t, "order/o-1/expire (the later of the commit)", tm, second)
		}
	}
	got := claimTimers(t, s, store.ClaimParams{Now: base, Limit: 10, Lease: time.Minute})
	checkStrings(t, "claim due timers", timerIDs(got), []string{"t-2"})
}

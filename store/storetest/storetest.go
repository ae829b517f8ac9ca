// Package storetest is the conformance suite for implementations of
// store.Store. A backend runs it once per configuration from an ordinary
// test, declaring in a Features value what it does beyond store.Store:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Features{}, func(t *testing.T) store.Store {
//			return memstore.New(nil)
//		})
//	}
//
// Run starts one subtest per line of the contract in package store, named
// after it (for example "LoadReturnsFreshCopy" or
// "ConcurrentUnitsOfWorkNoLostUpdate"), so that a failure points at the line
// that broke and `go test -run 'Conformance/Sweep'` reruns a part, and one
// per optional capability (a store that is its own queue, partitioned
// receive, a pending count, an append-only journal), which skips with the
// reason when the Features do not declare it. The operators' queries
// (readmodel.InstanceQuerier, readmodel.DeadLetterQuerier and the like) are found by
// type assertion on one store from newStore: each has a subtest named
// after it ("InstanceQuerier/QueryInstancesFilters"), skipped with the
// reason when the store does not implement it, and failed when the store
// implements it without what its cases also need. Every subtest calls
// t.Parallel and then newStore for its own store. The subtest
// "FeaturesMatchStore" fails when the store implements a capability that the
// Features do not declare, or declares one it does not implement, so that
// no capability goes untested by omission.
//
// newStore must return a new, empty store that shares no rows with any other
// store it returned (a schema per test on PostgreSQL, a file in t.TempDir
// for SQLite). It may call t.Skip or t.Fatal, and may register t.Cleanup
// functions to drop what it created: the suite closes the store with Close
// before those run, and reports an error from Close.
//
// Times are written with microsecond precision in UTC and compared with
// time.Time.Equal, and Instance.Data is compared as JSON (a jsonb column may
// reformat it), so SQL backends need not preserve more than that. Envelope
// bodies are compared byte for byte. Keys are lowercase ASCII, so any
// collation orders them like Go's string comparison.
//
// Where package store leaves a detail open, the suite checks one reading,
// and a backend must follow it:
//
//   - Units of work are optimistic: several may be open at once, in one
//     goroutine, and Begin and Load never wait for another unit of work to
//     finish (no SELECT ... FOR UPDATE, no BEGIN IMMEDIATE before Commit).
//     A stale write is found at Commit and wraps store.ErrConflict, whatever
//     the database reports (a serialization failure, SQLITE_BUSY_SNAPSHOT).
//   - ClaimParams.Now is the clock of due times and CreatedBefore. A lease
//     ends Lease after the claim: on ClaimParams.Now (memstore), or on the
//     backend's own clock when its processes share one (the database's),
//     so the cases that need a lease to end use a short one, move Now past
//     it and let it pass in real time too. A backend of the second kind
//     also sets Features.SharedClock.
//   - Scheduling a timer name again replaces its lease too: the new timer
//     can be claimed as soon as it is due.
//   - ListParams.State filters instances on Instance.State; ListParams.SagaType
//     filters instances, timers and dead letters.
//   - The cursor ListParams.After of ListInstances is the Key of the last
//     instance when SagaType is set, and SagaType + "\x00" + Key otherwise.
//   - A zero SweepParams.FinishedBefore or SentBefore deletes nothing of its
//     kind.
//   - Load and Commit on a finished unit of work (after Commit or Rollback)
//     fail and write nothing; Rollback on a finished unit of work returns
//     nil, also after a Commit that failed.
//
// The contract line "writes are acknowledged by durable storage before
// Commit returns" cannot be observed from inside one process and is not
// checked.
package storetest

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// testCase is one named subtest of the contract. It receives a fresh store.
type testCase struct {
	name string
	fn   func(t *testing.T, s store.Store)
}

// featureCase is one named subtest of an optional capability. needs returns
// why the subtest is skipped under f, or "" when it runs.
type featureCase struct {
	name  string
	needs func(f Features) string
	fn    func(t *testing.T, s store.Store, f Features)
}

var testCases = []testCase{
	// Hostile input.
	{"DeadLetterKeepsHostileEnvelope", testDeadLetterKeepsHostileEnvelope},
	{"StateWithNULIsKeptOrRejected", testStateWithNULIsKeptOrRejected},
	// Instances and units of work.
	{"InstanceRoundTrip", testInstanceRoundTrip},
	{"VersionAfterInsertAndUpdate", testVersionAfterInsertAndUpdate},
	{"LoadReturnsFreshCopy", testLoadReturnsFreshCopy},
	{"LoadMissingIsNilNotError", testLoadMissingIsNilNotError},
	{"InsertExistingConflicts", testInsertExistingConflicts},
	{"UpdateStaleVersionConflicts", testUpdateStaleVersionConflicts},
	{"UpdateMissingConflicts", testUpdateMissingConflicts},
	{"ConflictErrorIsErrConflict", testConflictErrorIsErrConflict},
	{"CommitIsAllOrNothing", testCommitIsAllOrNothing},
	{"EmptyCommitSucceeds", testEmptyCommitSucceeds},
	{"ConcurrentUnitsOfWorkNoLostUpdate", testConcurrentUnitsOfWorkNoLostUpdate},
	{"ConcurrentInsertsOneWins", testConcurrentInsertsOneWins},
	{"RollbackDiscards", testRollbackDiscards},
	{"RollbackAfterCommitNoop", testRollbackAfterCommitNoop},
	{"FreshCopyOnLoadAfterCommit", testFreshCopyOnLoadAfterCommit},
	{"ReadsReturnFreshCopies", testReadsReturnFreshCopies},

	// Inbox.
	{"InboxSeenAfterCommit", testInboxSeenAfterCommit},
	{"InboxDuplicateRecordIgnored", testInboxDuplicateRecordIgnored},

	// Outbox.
	{"OutboxClaimAndMarkSent", testOutboxClaimAndMarkSent},
	{"OutboxBacklog", testOutboxBacklog},
	{"OutboxRepeatedInOneCommit", testOutboxRepeatedInOneCommit},

	// Timers.
	{"TimersReplaceByName", testTimersReplaceByName},
	{"TimersRepeatedInOneCommit", testTimersRepeatedInOneCommit},
	{"TimersCancel", testTimersCancel},
	{"ClaimDueTimers", testClaimDueTimers},
	{"DeleteTimersKeepsRescheduled", testDeleteTimersKeepsRescheduled},
	{"ListTimers", testListTimers},
	{"TimersOfSaga", testTimersOfSaga},
	{"RowsEstimatedAndCounted", testRowsEstimatedAndCounted},

	// Retention.
	{"SweepDeletesFinishedInBoundedBatches", testSweepDeletesFinishedInBoundedBatches},
	{"SweepDeletesSentOutbox", testSweepDeletesSentOutbox},
	{"SweepDeletesJournalOfSweptInstances", testSweepDeletesJournalOfSweptInstances},
	{"SweepDeletesOrphanInboxInBoundedBatches", testSweepDeletesOrphanInboxInBoundedBatches},

	// Operations.
	{"ListInstances", testListInstances},
	{"Journal", testJournal},
	{"DeadLetters", testDeadLetters},
	{"DeadLettersRepeatedInOneCommit", testDeadLettersRepeatedInOneCommit},

	// What a commit refuses before writing anything.
	{"ChangesValidation", testChangesValidation},
}

var featureCases = []featureCase{
	{"FeaturesMatchStore", always, testFeaturesMatchStore},
	{"JournalAppendOnly", needTamperJournal, testJournalAppendOnly},
	{"QueueConsumeAndEnqueueCommitTogether", needQueue, testQueueConsumeAndEnqueueCommitTogether},
	{"QueueFailedCommitKeepsDelivery", needQueue, testQueueFailedCommitKeepsDelivery},
	{"QueueConsumeOfLostLeaseFails", needQueue, testQueueConsumeOfLostLeaseFails},
	{"QueuePartitionsByCanonicalKey", needPartitioned, testQueuePartitionsByCanonicalKey},
	{"QueuePending", needPending, testQueuePending},
	{"ClaimSettlesOnCommit", needClaim, testClaimSettlesOnCommit},
	{"ClaimRollbackReturnsUntouched", needClaim, testClaimRollbackReturnsUntouched},
	{"ClaimUnconsumedRefused", needClaim, testClaimUnconsumedRefused},
	{"ClaimConcurrentDisjoint", needClaim, testClaimConcurrentDisjoint},
	{"ClaimSkipsInvisible", needClaim, testClaimSkipsInvisible},
	{"ClaimPartitionsAsReceive", needClaimPartitioned, testClaimPartitionsAsReceive},
	{"ClaimReturnKeepsAttempt", needClaim, testClaimReturnKeepsAttempt},
	{"ClaimLeaseAfterFailedCommit", needClaim, testClaimLeaseAfterFailedCommit},
	{"DomainTxCommitsWithTheUnitOfWork", always, testDomainTx},
	{"TokensMintLoadClaim", needTokens, testTokensMintLoadClaim},
	{"TokensClaimOfClaimedConflicts", needTokens, testTokensClaimOfClaimedConflicts},
	{"TokensMintOutsideUnitOfWork", needTokens, testTokensMintOutsideUnitOfWork},
	{"TokensSurviveSweep", needTokens, testTokensSurviveSweep},
	{"TokensSweepByAge", needTokens, testTokensSweepByAge},
	{"TokensSweepBadInput", needTokens, testTokensSweepBadInput},
	{"TokensOfDeadLettersKept", needTokens, testTokensOfDeadLettersKept},
}

// Run runs the conformance suite against the stores newStore returns, one
// parallel subtest per contract line and per capability, each with a fresh
// store. It is the one entry point for a store: it runs the cases of every
// capability f declares, and of every optional interface the store
// implements (found by type assertion on one store from newStore), in a
// subtest named after it; a subtest it skips says why. It fails at once
// when f is inconsistent (Features.Queue without a Lease, say).
func Run(t *testing.T, f Features, newStore func(t *testing.T) store.Store) {
	t.Helper()
	if err := f.validate(); err != nil {
		t.Fatalf("storetest: %v", err)
	}
	open := func(t *testing.T) store.Store {
		t.Helper()
		s := newStore(t)
		if s == nil {
			t.Fatal("newStore returned nil")
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("close: got error %v, want nil", err)
			}
		})
		return s
	}
	for _, tc := range slices.Concat(testCases, scheduleCases, retryCases) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
	t.Run("SchemaVersionChecked", func(t *testing.T) {
		t.Parallel()
		if f.Schema == nil {
			t.Skip("Features.Schema is nil: the store has no versioned schema")
		}
		testSchemaVersionChecked(t, f.Schema)
	})
	for _, fc := range featureCases {
		t.Run(fc.name, func(t *testing.T) {
			t.Parallel()
			if reason := fc.needs(f); reason != "" {
				t.Skip(reason)
			}
			fc.fn(t, open(t), f)
		})
	}
	t.Run("SharedClock", func(t *testing.T) {
		t.Parallel()
		if f.SharedClock == nil {
			t.Skip("Features.SharedClock is nil: no two processes share the store's clock")
		}
		runSharedClock(t, f.SharedClock)
	})
	runCapabilities(t, open(t), open)
}

// now returns the current time in UTC at microsecond precision, which every
// SQL backend round-trips.
func now() time.Time {
	return time.Now().UTC().Truncate(time.Microsecond)
}

// key returns the store.Key of sagaType/k.
func key(sagaType, k string) store.Key {
	return store.Key{SagaType: sagaType, Key: k}
}

// newInstance returns an instance ready to insert.
func newInstance(sagaType, k string, at time.Time) *store.Instance {
	return &store.Instance{
		SagaType:      sagaType,
		Key:           k,
		State:         "Started",
		Data:          []byte(`{"n":0,"name":"` + k + `"}`),
		SchemaVersion: 1,
		Version:       1,
		Timers:        map[string]string{"expire": "timer-" + k},
		CreatedAt:     at,
		UpdatedAt:     at,
	}
}

// envelope returns an envelope with every field set.
func envelope(id string, at time.Time) transport.Envelope {
	return transport.Envelope{
		ID:             id,
		Type:           "test.Ping",
		CorrelationID:  "corr-" + id,
		CausationID:    "cause-" + id,
		IdempotencyKey: "idem-" + id,
		Headers: map[string]string{
			transport.HeaderTraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			transport.HeaderIntent:      "send",
		},
		SentAt: at,
		Body:   []byte(`{"id":"` + id + `"}`),
	}
}

// timer returns a timer named name of sagaType/k that fires envelope envID.
func timer(sagaType, k, name, envID string, due time.Time) store.Timer {
	return store.Timer{SagaType: sagaType, Key: k, Name: name, DueAt: due, Envelope: envelope(envID, due)}
}

// begin starts a unit of work and fails the test on error.
func begin(t *testing.T, s store.Store) store.UnitOfWork {
	t.Helper()
	uow, err := s.Begin(t.Context())
	if err != nil {
		t.Fatalf("begin: got error %v, want nil", err)
	}
	return uow
}

// tryCommit commits c in a new unit of work and returns Commit's error. It
// checks that Rollback afterwards returns nil.
func tryCommit(t *testing.T, s store.Store, c *store.Changes) error {
	t.Helper()
	uow := begin(t, s)
	err := uow.Commit(t.Context(), c)
	if rerr := uow.Rollback(t.Context()); rerr != nil {
		t.Errorf("rollback after commit: got error %v, want nil", rerr)
	}
	return err
}

// commit commits c in a new unit of work and fails the test on error.
func commit(t *testing.T, s store.Store, c *store.Changes) {
	t.Helper()
	if err := tryCommit(t, s, c); err != nil {
		t.Fatalf("commit: got error %v, want nil", err)
	}
}

// loadIn loads p in uow and fails the test on error.
func loadIn(t *testing.T, uow store.UnitOfWork, p *store.LoadParams) *store.LoadResult {
	t.Helper()
	res, err := uow.Load(t.Context(), p)
	if err != nil {
		t.Fatalf("load: got error %v, want nil", err)
	}
	if res == nil {
		t.Fatal("load: got nil result, want non-nil")
	}
	return res
}

// load loads p in a new unit of work that it rolls back.
func load(t *testing.T, s store.Store, p *store.LoadParams) *store.LoadResult {
	t.Helper()
	uow := begin(t, s)
	defer func() {
		if err := uow.Rollback(t.Context()); err != nil {
			t.Errorf("rollback: got error %v, want nil", err)
		}
	}()
	return loadIn(t, uow, p)
}

// loadOne returns the instance k, or nil.
func loadOne(t *testing.T, s store.Store, k store.Key) *store.Instance {
	t.Helper()
	return load(t, s, &store.LoadParams{Keys: []store.Key{k}}).Instances[k]
}

// seen reports whether the inbox holds ik.
func seen(t *testing.T, s store.Store, ik store.InboxKey) bool {
	t.Helper()
	return load(t, s, &store.LoadParams{Inbox: []store.InboxKey{ik}}).Seen[ik]
}

// listTimers returns every timer.
func listTimers(t *testing.T, s store.Store) []store.Timer {
	t.Helper()
	ts, err := s.ListTimers(t.Context(), &store.ListParams{Limit: 1000})
	if err != nil {
		t.Fatalf("list timers: got error %v, want nil", err)
	}
	return ts
}

// shortLease is the lease of the claims whose end a case waits for: a
// store may measure leases on its own clock, where it passes in real time
// (see waitOut). Long enough for the next statement to come within it.
const shortLease = 2 * time.Second

// waitOut lets a lease of d, taken before the call, end on any clock:
// the case moves ClaimParams.Now past it as well. This waits for time to
// pass, as a lease is time, and synchronises with nothing.
func waitOut(d time.Duration) { time.Sleep(d + 10*time.Millisecond) }

// claimOutbox claims with p and fails the test on error.
func claimOutbox(t *testing.T, s store.Store, p store.ClaimParams) []store.OutboxMessage {
	t.Helper()
	ms, err := s.ClaimOutbox(t.Context(), &p)
	if err != nil {
		t.Fatalf("claim outbox: got error %v, want nil", err)
	}
	return ms
}

// claimTimers claims with p and fails the test on error.
func claimTimers(t *testing.T, s store.Store, p store.ClaimParams) []store.Timer {
	t.Helper()
	ts, err := s.ClaimTimers(t.Context(), &p)
	if err != nil {
		t.Fatalf("claim timers: got error %v, want nil", err)
	}
	return ts
}

// markSent marks ids sent and fails the test on error.
func markSent(t *testing.T, s store.Store, at time.Time, ids ...string) {
	t.Helper()
	if err := s.MarkSent(t.Context(), ids, at); err != nil {
		t.Fatalf("mark sent %v: got error %v, want nil", ids, err)
	}
}

// backlog returns OutboxBacklog's results and fails the test on error.
func backlog(t *testing.T, s store.Store) (int, time.Time) {
	t.Helper()
	n, oldest, err := s.OutboxBacklog(t.Context())
	if err != nil {
		t.Fatalf("outbox backlog: got error %v, want nil", err)
	}
	return n, oldest
}

// outboxIDs returns the sorted envelope IDs of ms.
func outboxIDs(ms []store.OutboxMessage) []string {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.Envelope.ID
	}
	slices.Sort(ids)
	return ids
}

// timerIDs returns the sorted envelope IDs of ts.
func timerIDs(ts []store.Timer) []string {
	ids := make([]string, len(ts))
	for i, tm := range ts {
		ids[i] = tm.Envelope.ID
	}
	slices.Sort(ids)
	return ids
}

// instanceKeys returns "sagaType/key" of each instance, in order.
func instanceKeys(ins []*store.Instance) []string {
	ks := make([]string, len(ins))
	for i, in := range ins {
		ks[i] = in.SagaType + "/" + in.Key
	}
	return ks
}

// checkStrings reports a difference between two string slices.
func checkStrings(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: got %q, want %q", what, got, want)
	}
}

// jsonEqual reports whether a and b encode the same JSON value, or are equal
// bytes when either is not JSON.
func jsonEqual(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// equalMaps compares string maps, treating nil and empty as equal.
func equalMaps(a, b map[string]string) bool {
	return len(a) == len(b) && maps.Equal(a, b)
}

// checkInstance reports every field in which got differs from want.
func checkInstance(t *testing.T, what string, got, want *store.Instance) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: got nil instance, want %s/%s", what, want.SagaType, want.Key)
		return
	}
	if got.SagaType != want.SagaType || got.Key != want.Key {
		t.Errorf("%s: key: got %s/%s, want %s/%s", what, got.SagaType, got.Key, want.SagaType, want.Key)
	}
	if got.State != want.State {
		t.Errorf("%s: State: got %q, want %q", what, got.State, want.State)
	}
	if !jsonEqual(got.Data, want.Data) {
		t.Errorf("%s: Data: got %s, want %s", what, got.Data, want.Data)
	}
	if got.SchemaVersion != want.SchemaVersion {
		t.Errorf("%s: SchemaVersion: got %d, want %d", what, got.SchemaVersion, want.SchemaVersion)
	}
	if got.Version != want.Version {
		t.Errorf("%s: Version: got %d, want %d", what, got.Version, want.Version)
	}
	if !equalMaps(got.Timers, want.Timers) {
		t.Errorf("%s: Timers: got %v, want %v", what, got.Timers, want.Timers)
	}
	if !equalMaps(got.Attributes, want.Attributes) {
		t.Errorf("%s: Attributes: got %v, want %v", what, got.Attributes, want.Attributes)
	}
	if !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("%s: CreatedAt: got %v, want %v", what, got.CreatedAt, want.CreatedAt)
	}
	if !got.UpdatedAt.Equal(want.UpdatedAt) {
		t.Errorf("%s: UpdatedAt: got %v, want %v", what, got.UpdatedAt, want.UpdatedAt)
	}
	if !got.FinishedAt.Equal(want.FinishedAt) {
		t.Errorf("%s: FinishedAt: got %v, want %v", what, got.FinishedAt, want.FinishedAt)
	}
}

// checkEnvelope reports every field in which got differs from want.
func checkEnvelope(t *testing.T, what string, got, want transport.Envelope) {
	t.Helper()
	if got.ID != want.ID {
		t.Errorf("%s: envelope ID: got %q, want %q", what, got.ID, want.ID)
	}
	if got.Type != want.Type {
		t.Errorf("%s: envelope Type: got %q, want %q", what, got.Type, want.Type)
	}
	if got.CorrelationID != want.CorrelationID {
		t.Errorf("%s: envelope CorrelationID: got %q, want %q", what, got.CorrelationID, want.CorrelationID)
	}
	if got.CausationID != want.CausationID {
		t.Errorf("%s: envelope CausationID: got %q, want %q", what, got.CausationID, want.CausationID)
	}
	if got.IdempotencyKey != want.IdempotencyKey {
		t.Errorf("%s: envelope IdempotencyKey: got %q, want %q", what, got.IdempotencyKey, want.IdempotencyKey)
	}
	if !equalMaps(got.Headers, want.Headers) {
		t.Errorf("%s: envelope Headers: got %v, want %v", what, got.Headers, want.Headers)
	}
	if !got.SentAt.Equal(want.SentAt) {
		t.Errorf("%s: envelope SentAt: got %v, want %v", what, got.SentAt, want.SentAt)
	}
	if !bytes.Equal(got.Body, want.Body) {
		t.Errorf("%s: envelope Body: got %q, want %q", what, got.Body, want.Body)
	}
}

// checkTimer reports every field in which got differs from want.
func checkTimer(t *testing.T, what string, got, want store.Timer) {
	t.Helper()
	if got.SagaType != want.SagaType || got.Key != want.Key || got.Name != want.Name {
		t.Errorf("%s: timer: got %s/%s/%s, want %s/%s/%s", what,
			got.SagaType, got.Key, got.Name, want.SagaType, want.Key, want.Name)
	}
	if !got.DueAt.Equal(want.DueAt) {
		t.Errorf("%s: DueAt: got %v, want %v", what, got.DueAt, want.DueAt)
	}
	checkEnvelope(t, what, got.Envelope, want.Envelope)
}

// checkDeadLetter reports every field in which got differs from want.
func checkDeadLetter(t *testing.T, what string, got, want store.DeadLetter) {
	t.Helper()
	if got.ID != want.ID {
		t.Errorf("%s: ID: got %q, want %q", what, got.ID, want.ID)
	}
	if got.Reason != want.Reason {
		t.Errorf("%s: Reason: got %q, want %q", what, got.Reason, want.Reason)
	}
	if got.Error != want.Error {
		t.Errorf("%s: Error: got %q, want %q", what, got.Error, want.Error)
	}
	if got.SagaType != want.SagaType || got.Key != want.Key {
		t.Errorf("%s: saga: got %s/%s, want %s/%s", what, got.SagaType, got.Key, want.SagaType, want.Key)
	}
	if got.Attempts != want.Attempts {
		t.Errorf("%s: Attempts: got %d, want %d", what, got.Attempts, want.Attempts)
	}
	if !got.FirstFailedAt.Equal(want.FirstFailedAt) {
		t.Errorf("%s: FirstFailedAt: got %v, want %v", what, got.FirstFailedAt, want.FirstFailedAt)
	}
	if !got.LastFailedAt.Equal(want.LastFailedAt) {
		t.Errorf("%s: LastFailedAt: got %v, want %v", what, got.LastFailedAt, want.LastFailedAt)
	}
	checkEnvelope(t, what, got.Envelope, want.Envelope)
}

// checkJournalEntry reports every field in which got differs from want.
func checkJournalEntry(t *testing.T, what string, got, want store.JournalEntry) {
	t.Helper()
	g, w := got, want
	g.At, w.At = time.Time{}, time.Time{}
	if !reflect.DeepEqual(g, w) || !got.At.Equal(want.At) {
		t.Errorf("%s: got %+v, want %+v", what, got, want)
	}
}

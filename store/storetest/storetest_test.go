package storetest_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/readmodel"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/store/storetest"
	"github.com/idemhq/idem/transport"
)

// mutantEnv names the broken store a child process runs the suite on.
const mutantEnv = "STORETEST_MUTANT"

// mutants are the deliberately broken stores, each with the subtest meant
// to catch its bug. A bug "" is the wrapper without a bug: the control that
// shows the subtests fail for the bug, not for the wrapper.
var mutants = []struct {
	bug     string
	subtest string
}{
	{"load-returns-shared-copy", "LoadReturnsFreshCopy"},
	{"update-ignores-version", "UpdateStaleVersionConflicts"},
	{"commit-swallows-conflict", "InsertExistingConflicts"},
	{"drops-dead-letter-replacement", "DeadLetters"},
	{"insert-any-version", "ChangesValidation"},
	{"journal-tamperable", "JournalAppendOnly"},
	{"queue-consume-before-commit", "QueueFailedCommitKeepsDelivery"},
	{"queue-enqueue-before-commit", "QueueFailedCommitKeepsDelivery"},
	{"queue-consume-drops-lost-lease", "QueueConsumeOfLostLeaseFails"},
	{"queue-pending-counts-leased-as-ready", "QueuePending"},
	{"queue-partitions-by-raw-key", "QueuePartitionsByCanonicalKey"},
	{"schema-refusal-unwrapped", "SchemaVersionChecked"},
}

// TestSuiteCatchesBrokenStores runs the suite, in a child process, on stores
// with one deliberate bug each, and checks that the subtest meant to catch
// the bug fails; and on the same wrappers without a bug, and checks that
// those subtests pass.
func TestSuiteCatchesBrokenStores(t *testing.T) {
	if bug, ok := os.LookupEnv(mutantEnv); ok {
		runMutant(t, bug)
		return
	}
	controls := map[string][]string{} // wrapper kind → subtests
	for _, m := range mutants {
		controls[kind(m.bug)] = append(controls[kind(m.bug)], m.subtest)
	}
	for _, m := range mutants {
		t.Run(m.bug, func(t *testing.T) {
			t.Parallel()
			out, err := child(t, m.bug, m.subtest)
			if err == nil {
				t.Fatalf("the suite passed a store whose bug is %q, want %s to fail; output:\n%s", m.bug, m.subtest, out)
			}
			if want := "--- FAIL: " + parent(t) + "/" + m.subtest; !strings.Contains(out, want) {
				t.Fatalf("output lacks %q; output:\n%s", want, out)
			}
		})
	}
	for k, subtests := range controls {
		t.Run("control-"+k, func(t *testing.T) {
			t.Parallel()
			if out, err := child(t, k+":", strings.Join(subtests, "|")); err != nil {
				t.Fatalf("the suite failed the %s wrapper without a bug: %v; output:\n%s", k, err, out)
			}
		})
	}
}

// kind is the wrapper a bug belongs to.
func kind(bug string) string {
	switch {
	case strings.HasPrefix(bug, "queue-partitions"):
		return "partitioned"
	case strings.HasPrefix(bug, "queue-"):
		return "queue"
	}
	return "memstore"
}

// parent is the name of the top-level test.
func parent(t *testing.T) string { return t.Name()[:strings.IndexByte(t.Name(), '/')] }

// child runs the subtests matching pattern on the store with bug.
func child(t *testing.T, bug, pattern string) (string, error) {
	return childOf(t, parent(t), bug, pattern)
}

// TestCapabilitiesFoundByAssertion runs the suite, in a child process, on
// a store that hides the operators' queries, and checks that each of their
// subtests is skipped and says why; and on a store that implements
// readmodel.DeadLetterGrouper without readmodel.DeadLetterArchiver, and checks that
// the subtest of the pair fails rather than skips.
func TestCapabilitiesFoundByAssertion(t *testing.T) {
	if _, ok := os.LookupEnv(mutantEnv); ok {
		return // runMutant runs in TestSuiteCatchesBrokenStores
	}
	t.Run("hidden", func(t *testing.T) {
		out, err := childOf(t, "TestSuiteCatchesBrokenStores", "hidden-capabilities", "InstanceQuerier|TimerQuerier|QueryCounter|DeadLetterQuerier|DeadLetterReplayer|DeadLetterTriage|DeadLetterState")
		if err != nil {
			t.Fatalf("the suite failed a store without optional queries: %v; output:\n%s", err, out)
		}
		for _, c := range []struct{ subtest, iface string }{
			{"InstanceQuerier", "readmodel.InstanceQuerier"},
			{"TimerQuerier", "readmodel.TimerQuerier"},
			{"QueryCounter", "readmodel.QueryCounter"},
			{"DeadLetterQuerier", "readmodel.DeadLetterQuerier"},
			{"DeadLetterReplayer", "store.DeadLetterReplayer"},
			{"DeadLetterTriage", "readmodel.DeadLetterGrouper"},
			{"DeadLetterState", "readmodel.DeadLetterTypeQuerier"},
		} {
			if want := "--- SKIP: TestSuiteCatchesBrokenStores/" + c.subtest + " "; !strings.Contains(out, want) {
				t.Errorf("output lacks %q; output:\n%s", want, out)
			}
			if want := "does not implement " + c.iface; !strings.Contains(out, want) {
				t.Errorf("output lacks the reason %q", want)
			}
		}
	})
	t.Run("partial", func(t *testing.T) {
		out, err := childOf(t, "TestSuiteCatchesBrokenStores", "grouper-without-archiver", "DeadLetterTriage")
		if err == nil {
			t.Fatalf("the suite passed a store with readmodel.DeadLetterGrouper but not readmodel.DeadLetterArchiver; output:\n%s", out)
		}
		for _, want := range []string{"--- FAIL: TestSuiteCatchesBrokenStores/DeadLetterTriage ", "but not readmodel.DeadLetterArchiver"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q; output:\n%s", want, out)
			}
		}
	})
}

// childOf runs the subtests of the top-level test top matching pattern on
// the store with bug.
func childOf(t *testing.T, top, bug, pattern string) (string, error) {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+top+"$/^("+pattern+")$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), mutantEnv+"="+bug)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// bareStore is a store.Store and nothing more: its optional interfaces
// are hidden.
type bareStore struct{ store.Store }

// grouperOnly is a store.Store that groups dead letters but cannot archive
// them.
type grouperOnly struct {
	store.Store
	readmodel.DeadLetterGrouper
	readmodel.DeadLetterQuerier
}

// runMutant runs the suite on the store with bug, or on the wrapper of a
// kind without a bug when bug is "kind:".
func runMutant(t *testing.T, bug string) {
	switch bug {
	case "hidden-capabilities":
		storetest.Run(t, storetest.Features{}, func(t *testing.T) store.Store { return bareStore{memstore.New(nil)} })
		return
	case "grouper-without-archiver":
		storetest.Run(t, storetest.Features{}, func(t *testing.T) store.Store {
			s := memstore.New(nil)
			return grouperOnly{s, s, s}
		})
		return
	}
	k, control := strings.CutSuffix(bug, ":")
	if control {
		bug = ""
	} else {
		k = kind(bug)
	}
	switch k {
	case "memstore":
		proto := &mutant{bug: bug}
		f := storetest.Features{Tokens: true}
		if bug == "journal-tamperable" || control {
			// The control tampers too, and is refused, like a SQL store.
			f.TamperJournal = func(t *testing.T, s store.Store, k store.Key) []error {
				return s.(*mutant).tamper(k)
			}
		}
		if bug == "schema-refusal-unwrapped" || control {
			f.Schema = schemaOpener(bug)
		}
		storetest.Run(t, f, func(t *testing.T) store.Store { return proto.fresh() })
	case "queue", "partitioned":
		lease := 250 * time.Millisecond
		switch k {
		case "partitioned":
			lease = 10 * time.Second // deliveries wait in the wrapper's buffers
		case "queue":
			if bug == "queue-pending-counts-leased-as-ready" || control {
				lease = time.Second // the exact counts need leases that hold
			}
		}
		f := storetest.Features{Queue: true, Lease: lease, Pending: true, Partitioned: k == "partitioned", Tokens: true}
		storetest.Run(t, f, func(t *testing.T) store.Store {
			s, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"),
				&sqlitestore.Config{Lease: lease, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			q := &queueMutant{Store: s, bug: bug}
			if k == "partitioned" {
				return &partitioned{queueMutant: q, buf: map[int][]transport.Delivery{}}
			}
			return q
		})
	default:
		t.Fatalf("unknown mutant %q", bug)
	}
}

// schemaOpener stands for a store at schema version 3 whose Open refuses
// other versions: with the sentinels wrapped, or, with the bug, with errors
// that only say the same words.
func schemaOpener(bug string) *storetest.Schema {
	refuse := func(sentinel error) error { return fmt.Errorf("open: %w: run idem migrate", sentinel) }
	if bug != "" {
		refuse = func(sentinel error) error { return errors.New("open: " + sentinel.Error()) }
	}
	return &storetest.Schema{Version: 3, RefusesNewer: true, OpenAt: func(t *testing.T, v int) error {
		switch {
		case v < 3:
			return refuse(store.ErrNotMigrated)
		case v > 3:
			return refuse(store.ErrSchemaTooNew)
		}
		return nil
	}}
}

// mutant is a memstore.Store with one bug.
type mutant struct {
	*memstore.Store
	bug string

	mu       sync.Mutex
	shared   map[store.Key]*store.Instance // load-returns-shared-copy
	tampered map[store.Key]bool            // journal-tamperable
}

// fresh returns a new mutant with the same bug on an empty memstore.
func (m *mutant) fresh() *mutant {
	return &mutant{Store: memstore.New(nil), bug: m.bug, shared: map[store.Key]*store.Instance{}, tampered: map[store.Key]bool{}}
}

func (m *mutant) Begin(ctx context.Context) (store.UnitOfWork, error) {
	uow, err := m.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &mutantUnit{UnitOfWork: uow, m: m}, nil
}

// tamper is what another writer can do to the journal of k: refused,
// unless the journal is tamperable.
func (m *mutant) tamper(k store.Key) []error {
	if m.bug != "journal-tamperable" {
		return []error{errors.New("append-only: update refused"), errors.New("append-only: delete refused")}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tampered[k] = true
	return []error{nil, nil}
}

func (m *mutant) Journal(ctx context.Context, k store.Key) ([]store.JournalEntry, error) {
	j, err := m.Store.Journal(ctx, k)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tampered[k] {
		for i := range j {
			j[i].ToState = "Tampered"
		}
	}
	return j, err
}

type mutantUnit struct {
	store.UnitOfWork
	m *mutant
}

func (u *mutantUnit) Load(ctx context.Context, p *store.LoadParams) (*store.LoadResult, error) {
	res, err := u.UnitOfWork.Load(ctx, p)
	if err != nil || u.m.bug != "load-returns-shared-copy" {
		return res, err
	}
	u.m.mu.Lock()
	defer u.m.mu.Unlock()
	for k, in := range res.Instances {
		if prev := u.m.shared[k]; prev != nil && prev.Version == in.Version {
			res.Instances[k] = prev
		} else {
			u.m.shared[k] = in
		}
	}
	return res, nil
}

func (u *mutantUnit) Commit(ctx context.Context, c *store.Changes) error {
	if c != nil {
		cp := *c
		c = &cp
	}
	switch u.m.bug {
	case "update-ignores-version":
		// Writes over whatever version is stored: a lost update.
		for i, in := range c.Updates {
			if cur := u.current(ctx, in); cur != nil {
				in = in.Clone()
				in.Version = cur.Version
				c.Updates[i] = in
			}
		}
	case "drops-dead-letter-replacement":
		var kept []store.DeadLetter
		for _, d := range c.DeadLetters {
			if _, err := u.m.GetDeadLetter(ctx, d.ID); err != nil {
				kept = append(kept, d)
			}
		}
		c.DeadLetters = kept
	case "insert-any-version":
		for i, in := range c.Inserts {
			if in != nil && in.Version != 1 {
				in = in.Clone()
				in.Version = 1
				c.Inserts[i] = in
			}
		}
	}
	err := u.UnitOfWork.Commit(ctx, c)
	if u.m.bug == "commit-swallows-conflict" && errors.Is(err, store.ErrConflict) {
		return nil
	}
	return err
}

// current loads the stored instance in in's place, outside this unit of
// work.
func (u *mutantUnit) current(ctx context.Context, in *store.Instance) *store.Instance {
	uow, err := u.m.Store.Begin(ctx)
	if err != nil {
		return nil
	}
	defer uow.Rollback(ctx)
	k := store.Key{SagaType: in.SagaType, Key: in.Key}
	res, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}})
	if err != nil {
		return nil
	}
	return res.Instances[k]
}

// queueMutant is a sqlitestore.Store, a store that is its own queue, with
// one bug.
type queueMutant struct {
	*sqlitestore.Store
	bug string
}

func (q *queueMutant) Begin(ctx context.Context) (store.UnitOfWork, error) {
	uow, err := q.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &queueUnit{QueueUnitOfWork: uow.(store.QueueUnitOfWork), q: q}, nil
}

func (q *queueMutant) Pending(ctx context.Context) (int, int, error) {
	ready, unacked, err := q.Store.Pending(ctx)
	if q.bug == "queue-pending-counts-leased-as-ready" {
		return ready + unacked, 0, err
	}
	return ready, unacked, err
}

type queueUnit struct {
	store.QueueUnitOfWork
	q *queueMutant
}

func (u *queueUnit) Consume(ctx context.Context, ds []transport.Delivery) error {
	switch u.q.bug {
	case "queue-consume-before-commit":
		return u.q.Ack(ctx, ds)
	case "queue-consume-drops-lost-lease":
		// Settles at once what it still can and forgets the rest, so the
		// commit never learns of a lost lease.
		_ = u.q.Ack(ctx, ds)
		return nil
	}
	return u.QueueUnitOfWork.Consume(ctx, ds)
}

func (u *queueUnit) Enqueue(ctx context.Context, msgs []transport.Envelope) error {
	if u.q.bug == "queue-enqueue-before-commit" {
		return u.q.Publish(ctx, msgs)
	}
	return u.QueueUnitOfWork.Enqueue(ctx, msgs)
}

// partitioned adds a partitioned receive to a queueMutant, sorting what the
// queue hands out into per-partition buffers by a hash of the canonical
// saga key, or of the raw one when its bug says so.
type partitioned struct {
	*queueMutant
	mu  sync.Mutex
	buf map[int][]transport.Delivery
}

func (p *partitioned) ReceivePartition(ctx context.Context, limit, part, parts int) ([]transport.Delivery, error) {
	for {
		p.mu.Lock()
		if ds := p.buf[part]; len(ds) > 0 {
			n := min(max(limit, 1), len(ds))
			p.buf[part] = ds[n:]
			p.mu.Unlock()
			return ds[:n], nil
		}
		p.mu.Unlock()
		ds, err := p.Receive(ctx, 100)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		for _, d := range ds {
			k := transport.PartitionKey(&d.Envelope)
			if p.bug == "queue-partitions-by-raw-key" && d.Envelope.CorrelationID != "" {
				k = d.Envelope.CorrelationID
			}
			h := fnv.New32a()
			h.Write([]byte(k))
			i := int(h.Sum32() % uint32(parts))
			p.buf[i] = append(p.buf[i], d)
		}
		p.mu.Unlock()
	}
}

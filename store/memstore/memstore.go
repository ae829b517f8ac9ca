package memstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
)

// defaultLimit replaces a Limit below 1 in claims, lists and sweeps.
const defaultLimit = 100

// errClosed is wrapped by every method of a closed Store.
var errClosed = errors.New("store closed")

// errFinished is wrapped by Load and Commit on a finished unit of work.
var errFinished = errors.New("unit of work finished")

var _ store.Store = (*Store)(nil)

// Config configures a Store. It has no fields yet; a nil *Config and the zero
// value both mean the defaults.
type Config struct{}

// Store is an in-memory store.Store. Create it with New; the zero value is
// not usable. It is safe for concurrent use.
type Store struct {
	mu        sync.RWMutex
	closed    bool
	seq       uint64 // orders outbox rows by commit
	instances map[store.Key]*store.Instance
	inbox     map[store.Key]map[string]time.Time // message ID → processed at
	unsent    map[string]*outboxRow              // by envelope ID
	sent      map[string]*outboxRow              // by envelope ID
	timers    map[store.Key]map[string]*timerRow // by timer name
	journal   map[store.Key][]store.JournalEntry
	dead      map[string]*store.DeadLetter
	schedules map[string]*store.Schedule      // by name; see schedule.go
	tokens    map[string]time.Time            // token inbox: ID → minted at
	replicas  map[string]*store.Replica       // by ID; see replica.go
	defs      map[[2]string]*store.Definition // by saga type and fingerprint; see definition.go
	// deadMarks numbers the recordings of dead letters (deadletters.go).
	deadMarks deadMarks
	retries   map[string]*store.Retry // by ID; see retry.go
	flow      flow                    // limits and holds; see flow.go
}

type outboxRow struct {
	msg        store.OutboxMessage
	seq        uint64
	leaseUntil time.Time
}

type timerRow struct {
	timer      store.Timer
	leaseUntil time.Time
}

// New returns an empty Store. cfg may be nil.
func New(cfg *Config) *Store {
	_ = cfg // no settings yet
	return &Store{
		instances: make(map[store.Key]*store.Instance),
		inbox:     make(map[store.Key]map[string]time.Time),
		unsent:    make(map[string]*outboxRow),
		sent:      make(map[string]*outboxRow),
		timers:    make(map[store.Key]map[string]*timerRow),
		journal:   make(map[store.Key][]store.JournalEntry),
		dead:      make(map[string]*store.DeadLetter),
	}
}

// check reports ctx's error or errClosed, wrapped with "memstore: " and
// op. The caller holds s.mu.
func (s *Store) check(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: %s: %w", op, err)
	}
	if s.closed {
		return fmt.Errorf("memstore: %s: %w", op, errClosed)
	}
	return nil
}

// Begin starts a unit of work. It fails only when ctx is done or the store
// is closed.
func (s *Store) Begin(ctx context.Context) (store.UnitOfWork, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "begin"); err != nil {
		return nil, err
	}
	return &unitOfWork{s: s}, nil
}

// unitOfWork is a store.UnitOfWork. It holds no lock between calls.
type unitOfWork struct {
	s       *Store
	done    bool
	advance []store.ScheduleAdvance
}

// Load returns copies of the committed instances and the inbox keys that
// have a record.
func (u *unitOfWork) Load(ctx context.Context, p *store.LoadParams) (*store.LoadResult, error) {
	if u.done {
		return nil, fmt.Errorf("memstore: load: %w", errFinished)
	}
	if p == nil {
		p = &store.LoadParams{}
	}
	s := u.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "load"); err != nil {
		return nil, err
	}
	res := &store.LoadResult{
		Instances: make(map[store.Key]*store.Instance, len(p.Keys)),
		Seen:      make(map[store.InboxKey]bool),
	}
	for _, k := range p.Keys {
		if in := s.instances[k]; in != nil {
			res.Instances[k] = in.Clone()
		}
	}
	for _, ik := range p.Inbox {
		if _, ok := s.inbox[store.Key{SagaType: ik.SagaType, Key: ik.Key}][ik.MessageID]; ok {
			res.Seen[ik] = true
		}
	}
	res.Tokens = s.loadTokens(p.Tokens)
	return res, nil
}

// Commit checks every insert and update against the committed versions, then
// applies all changes, or none when a check fails. A nil c commits nothing.
// The unit of work is finished afterwards, whatever the outcome.
func (u *unitOfWork) Commit(ctx context.Context, c *store.Changes) error {
	if u.done {
		return fmt.Errorf("memstore: commit: %w", errFinished)
	}
	u.done = true
	s := u.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "commit"); err != nil {
		return err
	}
	if c == nil {
		c = &store.Changes{}
	}
	if err := s.validate(c); err != nil {
		return err
	}
	if err := s.checkAdvances(u.advance); err != nil {
		return err
	}
	if err := s.validateTokens(c); err != nil {
		return err
	}
	s.apply(c)
	s.applyAdvances(u.advance)
	s.applyTokens(c)
	s.flow.release(c.ReleaseHolds)
	return nil
}

// Rollback finishes the unit of work. It never fails; after Commit it does
// nothing.
func (u *unitOfWork) Rollback(ctx context.Context) error {
	u.done = true
	return nil
}

// validate checks inserts and updates. The caller holds s.mu for writing.
func (s *Store) validate(c *store.Changes) error {
	touched := make(map[store.Key]bool, len(c.Inserts)+len(c.Updates))
	for _, in := range c.Inserts {
		if in == nil {
			return errors.New("memstore: commit: nil instance in inserts")
		}
		k := store.Key{SagaType: in.SagaType, Key: in.Key}
		if in.Version != 1 {
			return fmt.Errorf("memstore: commit saga %s/%s: insert with version %d, want 1", k.SagaType, k.Key, in.Version)
		}
		if s.instances[k] != nil || touched[k] {
			return fmt.Errorf("memstore: commit saga %s/%s: insert of existing instance: %w", k.SagaType, k.Key, store.ErrConflict)
		}
		touched[k] = true
	}
	for _, in := range c.Updates {
		if in == nil {
			return errors.New("memstore: commit: nil instance in updates")
		}
		k := store.Key{SagaType: in.SagaType, Key: in.Key}
		cur := s.instances[k]
		switch {
		case touched[k]:
			return fmt.Errorf("memstore: commit saga %s/%s: second write in one commit: %w", k.SagaType, k.Key, store.ErrConflict)
		case cur == nil:
			return fmt.Errorf("memstore: commit saga %s/%s: update of missing instance: %w", k.SagaType, k.Key, store.ErrConflict)
		case cur.Version != in.Version:
			return fmt.Errorf("memstore: commit saga %s/%s: update of version %d, stored version is %d: %w",
				k.SagaType, k.Key, in.Version, cur.Version, store.ErrConflict)
		}
		touched[k] = true
	}
	for i := range c.RecordRetries {
		if err := c.RecordRetries[i].Validate(); err != nil {
			return fmt.Errorf("memstore: commit: record retry: %w", err)
		}
	}
	return nil
}

// apply writes c, which validate accepted. The caller holds s.mu for
// writing.
func (s *Store) apply(c *store.Changes) {
	for _, in := range c.Inserts {
		s.instances[store.Key{SagaType: in.SagaType, Key: in.Key}] = in.Clone()
	}
	for _, in := range c.Updates {
		cp := in.Clone()
		cp.Version++
		s.instances[store.Key{SagaType: in.SagaType, Key: in.Key}] = cp
	}
	for _, e := range c.Inbox {
		k := store.Key{SagaType: e.SagaType, Key: e.Key}
		ids := s.inbox[k]
		if ids == nil {
			ids = make(map[string]time.Time)
			s.inbox[k] = ids
		}
		if _, ok := ids[e.MessageID]; !ok {
			ids[e.MessageID] = e.ProcessedAt
		}
	}
	for _, m := range c.Outbox {
		id := m.Envelope.ID
		if s.unsent[id] != nil || s.sent[id] != nil {
			continue
		}
		s.seq++
		row := &outboxRow{msg: cloneOutbox(m), seq: s.seq}
		if m.SentAt.IsZero() {
			s.unsent[id] = row
		} else {
			s.sent[id] = row
		}
	}
	for _, tk := range c.CancelTimers {
		s.deleteTimer(store.Key{SagaType: tk.SagaType, Key: tk.Key}, tk.Name)
	}
	for _, t := range c.Timers {
		k := store.Key{SagaType: t.SagaType, Key: t.Key}
		byName := s.timers[k]
		if byName == nil {
			byName = make(map[string]*timerRow)
			s.timers[k] = byName
		}
		byName[t.Name] = &timerRow{timer: cloneTimer(t)}
	}
	for _, j := range c.Journal {
		k := store.Key{SagaType: j.SagaType, Key: j.Key}
		s.journal[k] = append(s.journal[k], cloneJournalEntry(j))
	}
	for _, d := range c.DeadLetters {
		s.recordDeadLetter(&d)
	}
	if c.SettleReplays != nil {
		s.settleReplays(c.SettleReplays)
	}
	if c.SettleDuplicates != nil {
		s.settleReplays(c.SettleDuplicates)
	}
	for _, id := range c.ClearRetries {
		delete(s.retries, id)
	}
	for i := range c.RecordRetries {
		s.recordRetry(&c.RecordRetries[i])
	}
}

// deleteTimer removes one timer. The caller holds s.mu for writing.
func (s *Store) deleteTimer(k store.Key, name string) {
	byName := s.timers[k]
	if byName == nil {
		return
	}
	delete(byName, name)
	if len(byName) == 0 {
		delete(s.timers, k)
	}
}

// ClaimOutbox claims up to p.Limit unsent messages created before
// p.CreatedBefore whose lease ended at or before p.Now, in commit order, and
// leases them until p.Now+p.Lease.
func (s *Store) ClaimOutbox(ctx context.Context, p *store.ClaimParams) ([]store.OutboxMessage, error) {
	if p == nil {
		p = &store.ClaimParams{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "claim outbox"); err != nil {
		return nil, err
	}
	var rows []*outboxRow
	for _, row := range s.unsent {
		if row.msg.CreatedAt.Before(p.CreatedBefore) && !row.leaseUntil.After(p.Now) {
			rows = append(rows, row)
		}
	}
	slices.SortFunc(rows, func(a, b *outboxRow) int { return cmp.Compare(a.seq, b.seq) })
	rows = rows[:min(len(rows), limit(p.Limit))]
	out := make([]store.OutboxMessage, len(rows))
	for i, row := range rows {
		row.leaseUntil = p.Now.Add(p.Lease)
		out[i] = cloneOutbox(row.msg)
	}
	return out, nil
}

// MarkSent records that the messages with these envelope IDs were sent at
// at. Unknown and already sent IDs are ignored.
func (s *Store) MarkSent(ctx context.Context, ids []string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "mark sent"); err != nil {
		return err
	}
	for _, id := range ids {
		row := s.unsent[id]
		if row == nil {
			continue
		}
		delete(s.unsent, id)
		row.msg.SentAt = at
		row.leaseUntil = time.Time{}
		s.sent[id] = row
	}
	return nil
}

// ClaimTimers claims up to p.Limit timers due at or before p.Now whose lease
// ended at or before p.Now, earliest first, and leases them until
// p.Now+p.Lease.
func (s *Store) ClaimTimers(ctx context.Context, p *store.ClaimParams) ([]store.Timer, error) {
	if p == nil {
		p = &store.ClaimParams{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "claim timers"); err != nil {
		return nil, err
	}
	var rows []*timerRow
	for _, byName := range s.timers {
		for _, row := range byName {
			if !row.timer.DueAt.After(p.Now) && !row.leaseUntil.After(p.Now) {
				rows = append(rows, row)
			}
		}
	}
	slices.SortFunc(rows, func(a, b *timerRow) int { return compareTimers(&a.timer, &b.timer) })
	rows = rows[:min(len(rows), limit(p.Limit))]
	out := make([]store.Timer, len(rows))
	for i, row := range rows {
		row.leaseUntil = p.Now.Add(p.Lease)
		out[i] = cloneTimer(row.timer)
	}
	return out, nil
}

// DeleteTimers removes the given timers when the stored timer of the same
// name still fires the same envelope ID.
func (s *Store) DeleteTimers(ctx context.Context, ts []store.Timer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "delete timers"); err != nil {
		return err
	}
	for _, t := range ts {
		k := store.Key{SagaType: t.SagaType, Key: t.Key}
		if row := s.timers[k][t.Name]; row != nil && row.timer.Envelope.ID == t.Envelope.ID {
			s.deleteTimer(k, t.Name)
		}
	}
	return nil
}

// Sweep deletes up to p.Limit finished instances whose FinishedAt is before
// p.FinishedBefore, with their inbox records, timers and journal; up to
// p.Limit orphan inbox records older than p.InboxBefore; and up to p.Limit
// sent outbox messages whose SentAt is before p.SentBefore, oldest first.
func (s *Store) Sweep(ctx context.Context, p *store.SweepParams) (*store.SweepResult, error) {
	if p == nil {
		p = &store.SweepParams{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "sweep"); err != nil {
		return nil, err
	}
	n := limit(p.Limit)

	var done []*store.Instance
	for _, in := range s.instances {
		if !in.FinishedAt.IsZero() && in.FinishedAt.Before(p.FinishedBefore) {
			done = append(done, in)
		}
	}
	if len(done) > n {
		slices.SortFunc(done, func(a, b *store.Instance) int {
			return cmp.Or(a.FinishedAt.Compare(b.FinishedAt), cmp.Compare(a.SagaType, b.SagaType), cmp.Compare(a.Key, b.Key))
		})
		done = done[:n]
	}
	for _, in := range done {
		k := store.Key{SagaType: in.SagaType, Key: in.Key}
		delete(s.instances, k)
		delete(s.inbox, k)
		delete(s.timers, k)
		delete(s.journal, k)
	}

	inboxDeleted := 0
	if !p.InboxBefore.IsZero() {
	orphans:
		for k, ids := range s.inbox {
			if _, ok := s.instances[k]; ok {
				continue
			}
			for id, at := range ids {
				if inboxDeleted == n {
					break orphans
				}
				if at.Before(p.InboxBefore) {
					delete(ids, id)
					inboxDeleted++
				}
			}
			if len(ids) == 0 {
				delete(s.inbox, k)
			}
		}
	}

	var sent []*outboxRow
	for _, row := range s.sent {
		if row.msg.SentAt.Before(p.SentBefore) {
			sent = append(sent, row)
		}
	}
	if len(sent) > n {
		slices.SortFunc(sent, func(a, b *outboxRow) int {
			return cmp.Or(a.msg.SentAt.Compare(b.msg.SentAt), cmp.Compare(a.seq, b.seq))
		})
		sent = sent[:n]
	}
	for _, row := range sent {
		delete(s.sent, row.msg.Envelope.ID)
	}
	return &store.SweepResult{Instances: len(done), Inbox: inboxDeleted, Outbox: len(sent)}, nil
}

// ListInstances returns up to p.Limit instances ordered by (SagaType, Key)
// after the cursor p.After, filtered by p.SagaType and p.State when set. See
// the package documentation for the cursor's form.
func (s *Store) ListInstances(ctx context.Context, p *store.ListParams) ([]*store.Instance, error) {
	if p == nil {
		p = &store.ListParams{}
	}
	var after store.Key
	if p.After != "" {
		if t, k, ok := strings.Cut(p.After, "\x00"); ok {
			after = store.Key{SagaType: t, Key: k}
		} else if p.SagaType != "" {
			after = store.Key{SagaType: p.SagaType, Key: p.After}
		} else {
			return nil, fmt.Errorf("memstore: list instances: cursor %q without saga type: want saga type, NUL, key", p.After)
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "list instances"); err != nil {
		return nil, err
	}
	var list []*store.Instance
	for k, in := range s.instances {
		if (p.SagaType != "" && k.SagaType != p.SagaType) || (p.State != "" && in.State != p.State) {
			continue
		}
		if p.After != "" && compareKeys(k, after) <= 0 {
			continue
		}
		list = append(list, in)
	}
	slices.SortFunc(list, func(a, b *store.Instance) int {
		return cmp.Or(cmp.Compare(a.SagaType, b.SagaType), cmp.Compare(a.Key, b.Key))
	})
	list = list[:min(len(list), limit(p.Limit))]
	out := make([]*store.Instance, len(list))
	for i, in := range list {
		out[i] = in.Clone()
	}
	return out, nil
}

// Journal returns the journal of instance k in commit order; empty when
// there is none.
func (s *Store) Journal(ctx context.Context, k store.Key) ([]store.JournalEntry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "journal of saga "+k.SagaType+"/"+k.Key); err != nil {
		return nil, err
	}
	return cloneJournal(s.journal[k]), nil
}

// ListTimers returns up to p.Limit timers ordered by (DueAt, SagaType, Key,
// Name) after the cursor p.After, filtered by p.SagaType when set. See the
// package documentation for the cursor's form.
func (s *Store) ListTimers(ctx context.Context, p *store.ListParams) ([]store.Timer, error) {
	if p == nil {
		p = &store.ListParams{}
	}
	var after store.Timer
	if p.After != "" {
		parts := strings.Split(p.After, "\x00")
		if len(parts) != 4 {
			return nil, fmt.Errorf("memstore: list timers: cursor %q: want due time, saga type, key, name separated by NUL", p.After)
		}
		due, err := time.Parse(time.RFC3339Nano, parts[0])
		if err != nil {
			return nil, fmt.Errorf("memstore: list timers: cursor %q: %w", p.After, err)
		}
		after = store.Timer{DueAt: due, SagaType: parts[1], Key: parts[2], Name: parts[3]}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "list timers"); err != nil {
		return nil, err
	}
	var list []*store.Timer
	for k, byName := range s.timers {
		if p.SagaType != "" && k.SagaType != p.SagaType {
			continue
		}
		for _, row := range byName {
			if p.After != "" && compareTimers(&row.timer, &after) <= 0 {
				continue
			}
			list = append(list, &row.timer)
		}
	}
	slices.SortFunc(list, compareTimers)
	list = list[:min(len(list), limit(p.Limit))]
	out := make([]store.Timer, len(list))
	for i, t := range list {
		out[i] = cloneTimer(*t)
	}
	return out, nil
}

// OutboxBacklog counts unsent messages and returns the creation time of the
// oldest, or the zero time when there is none.
func (s *Store) OutboxBacklog(ctx context.Context) (int, time.Time, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "outbox backlog"); err != nil {
		return 0, time.Time{}, err
	}
	var oldest time.Time
	for _, row := range s.unsent {
		if oldest.IsZero() || row.msg.CreatedAt.Before(oldest) {
			oldest = row.msg.CreatedAt
		}
	}
	return len(s.unsent), oldest, nil
}

// ListDeadLetters returns up to p.Limit dead letters ordered by ID after the
// ID p.After, filtered by p.SagaType when set.
func (s *Store) ListDeadLetters(ctx context.Context, p *store.ListParams) ([]store.DeadLetter, error) {
	if p == nil {
		p = &store.ListParams{}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "list dead letters"); err != nil {
		return nil, err
	}
	var list []*store.DeadLetter
	for id, d := range s.dead {
		if (p.SagaType != "" && d.SagaType != p.SagaType) || (p.After != "" && id <= p.After) {
			continue
		}
		list = append(list, d)
	}
	slices.SortFunc(list, func(a, b *store.DeadLetter) int { return cmp.Compare(a.ID, b.ID) })
	list = list[:min(len(list), limit(p.Limit))]
	out := make([]store.DeadLetter, len(list))
	for i, d := range list {
		out[i] = *cloneDeadLetter(d)
	}
	return out, nil
}

// GetDeadLetter returns a copy of the dead letter id, or an error wrapping
// store.ErrNotFound.
func (s *Store) GetDeadLetter(ctx context.Context, id string) (*store.DeadLetter, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "get dead letter "+id); err != nil {
		return nil, err
	}
	d := s.dead[id]
	if d == nil {
		return nil, fmt.Errorf("memstore: get dead letter %s: %w", id, store.ErrNotFound)
	}
	return cloneDeadLetter(d), nil
}

// DeleteDeadLetters removes the dead letters with these IDs and returns how
// many existed.
func (s *Store) DeleteDeadLetters(ctx context.Context, ids []string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "delete dead letters"); err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		if s.dead[id] != nil {
			s.deleteDeadLetter(id)
			n++
		}
	}
	return n, nil
}

// Close discards the store's contents. Afterwards every method, including
// Load and Commit of units of work begun earlier, returns an error; Close and
// Rollback return nil. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.instances, s.inbox, s.unsent, s.sent, s.timers, s.journal, s.dead = nil, nil, nil, nil, nil, nil, nil
	return nil
}

func limit(n int) int {
	if n < 1 {
		return defaultLimit
	}
	return n
}

func compareKeys(a, b store.Key) int {
	return cmp.Or(cmp.Compare(a.SagaType, b.SagaType), cmp.Compare(a.Key, b.Key))
}

func compareTimers(a, b *store.Timer) int {
	return cmp.Or(a.DueAt.Compare(b.DueAt), cmp.Compare(a.SagaType, b.SagaType),
		cmp.Compare(a.Key, b.Key), cmp.Compare(a.Name, b.Name))
}

func cloneOutbox(m store.OutboxMessage) store.OutboxMessage {
	m.Envelope = m.Envelope.Clone()
	return m
}

func cloneTimer(t store.Timer) store.Timer {
	t.Envelope = t.Envelope.Clone()
	return t
}

func cloneDeadLetter(d *store.DeadLetter) *store.DeadLetter {
	c := *d
	c.Envelope = d.Envelope.Clone()
	c.Replays = slices.Clone(d.Replays)
	return &c
}

package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemhq/idem/transport"
)

// The consumer side. A poll loop fetches records of the partitions this
// member owns into a buffer; Receive hands them out from it with a lease
// kept in this process, and Ack commits, per partition, the offset after
// the longest prefix of settled records, so that a committed offset never
// passes an unsettled record. The group's rebalance callbacks drain and
// commit a partition before it is given up.

// recState is where a buffered record is.
type recState int

const (
	stReady   recState = iota // waiting to be handed out
	stOut                     // handed out, leased until rec.until
	stDelayed                 // nacked, handed out again from rec.until
	stAcked                   // settled; dropped once the prefix before it is
)

// rec is one buffered record.
type rec struct {
	r       *kgo.Record
	env     transport.Envelope
	hash    uint32 // transport.PartitionHash of the partition key
	st      recState
	attempt int       // hand-outs by this member, the Delivery.Attempt
	until   time.Time // the lease's end (stOut) or the delay's (stDelayed)
}

// part is one partition this member owns.
type part struct {
	id        int32
	epoch     uint64 // the assignment's number: tokens of another are stale
	recs      []*rec // in offset order, from the first unsettled one on
	commit    *kgo.Record
	committed int64 // the offset the group has committed, -1 unknown
	revoking  bool  // being given up: nothing more is handed out
}

// start creates the consumer and its poll loop, once.
func (t *Transport) start() error {
	t.startOnce.Do(func() {
		if t.isClosed() {
			t.startErr = transport.ErrClosed
			return
		}
		opts := append(t.commonOpts(),
			kgo.ConsumeTopics(t.cfg.Topic),
			kgo.ConsumerGroup(t.cfg.Group),
			kgo.DisableAutoCommit(),
			kgo.BlockRebalanceOnPoll(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.RebalanceTimeout(t.cfg.RebalanceTimeout),
			kgo.SessionTimeout(t.cfg.SessionTimeout),
			kgo.OnPartitionsAssigned(t.assigned),
			kgo.OnPartitionsRevoked(t.revoked),
			kgo.OnPartitionsLost(t.lost),
		)
		cl, err := kgo.NewClient(append(opts, t.cfg.Opts...)...)
		if err != nil {
			t.startErr = fmt.Errorf("kafka: consumer of %s: %w", t.safe, err)
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.consumer, t.stopPoll, t.pollDone, t.flushDone = cl, cancel, make(chan struct{}), make(chan struct{})
		go t.poll(ctx)
		go t.flush(ctx)
	})
	return t.startErr
}

// poll fetches records into the buffer. With BlockRebalanceOnPoll a
// rebalance waits for AllowRebalance, which comes right after the records
// are buffered: the callbacks never run between a poll and the buffering
// of its records, so a revoked partition's records never enter the buffer
// after its revoke. A partition that holds Config.MaxBuffered records is
// paused (not fetched) until its settled prefix shrinks; the others keep
// flowing.
func (t *Transport) poll(ctx context.Context) {
	defer close(t.pollDone)
	paused := map[int32]bool{}
	for {
		full, ch := t.pauseFull(paused)
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if full {
			// Poll until the buffer changes, to resume a partition whose
			// prefix was settled meanwhile.
			pctx, cancel = context.WithCancel(ctx)
			go func() {
				select {
				case <-ch:
					cancel()
				case <-pctx.Done():
				}
			}()
		}
		fs := t.consumer.PollRecords(pctx, t.cfg.MaxBuffered)
		cancel()
		if ctx.Err() != nil {
			t.consumer.AllowRebalance()
			return
		}
		failed := false
		fs.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
				return
			}
			failed = true
			t.log.Warn("kafka: fetch failed; retrying", "topic", topic, "partition", p, "error", err)
		})
		t.buffer(fs)
		t.consumer.AllowRebalance()
		if failed && fs.NumRecords() == 0 {
			select { // a back-off, not a synchronisation: the cluster is failing
			case <-time.After(250 * time.Millisecond):
			case <-ctx.Done():
				return
			}
		}
	}
}

// pauseFull pauses fetching the partitions that hold Config.MaxBuffered
// records or more and resumes the others that paused holds (the poll
// loop's record of what it paused). It reports whether any is paused,
// with the channel closed at the buffer's next change.
func (t *Transport) pauseFull(paused map[int32]bool) (bool, <-chan struct{}) {
	t.mu.Lock()
	want := map[int32]bool{}
	for id, p := range t.parts {
		if len(p.recs) >= t.cfg.MaxBuffered {
			want[id] = true
		}
	}
	ch := t.changed
	t.mu.Unlock()
	var pause, resume []int32
	for id := range want {
		if !paused[id] {
			pause = append(pause, id)
			paused[id] = true
		}
	}
	for id := range paused {
		if !want[id] {
			resume = append(resume, id)
			delete(paused, id)
		}
	}
	if len(pause) > 0 {
		t.consumer.PauseFetchPartitions(map[string][]int32{t.cfg.Topic: pause})
	}
	if len(resume) > 0 {
		t.consumer.ResumeFetchPartitions(map[string][]int32{t.cfg.Topic: resume})
	}
	return len(paused) > 0, ch
}

// buffer adds polled records to the partitions this member owns.
func (t *Transport) buffer(fs kgo.Fetches) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	fs.EachRecord(func(r *kgo.Record) {
		p := t.parts[r.Partition]
		if r.Topic != t.cfg.Topic || p == nil || p.revoking {
			return
		}
		if k := len(p.recs); k > 0 && r.Offset <= p.recs[k-1].r.Offset {
			return // a record already buffered
		}
		env := t.decode(r)
		p.recs = append(p.recs, &rec{r: r, env: env, hash: transport.PartitionHash(transport.PartitionKey(&env))})
		n++
	})
	if n > 0 {
		t.signal()
	}
}

// signal wakes whoever waits on the buffer; t.mu is held.
func (t *Transport) signal() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// assigned records the partitions the group gave this member, each with
// a new epoch. A partition it owns already keeps its buffer: the client
// goes on fetching after it.
func (t *Transport) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range m[t.cfg.Topic] {
		if t.parts[id] != nil {
			continue
		}
		t.epoch++
		t.parts[id] = &part{id: id, epoch: t.epoch, committed: -1}
	}
	t.signal()
}

// revoked gives partitions up: nothing more of them is handed out, the
// deliveries in flight are waited for (until settled, or their lease ends,
// or a lease has passed), the acknowledged prefix is committed, and the
// partitions are forgotten. A late settlement of one of their deliveries
// then fails with transport.ErrLeaseLost; the new owner hands out
// everything after the committed offset again, and the engine's inbox
// drops what had been applied. While closing it does not wait.
func (t *Transport) revoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	ps := m[t.cfg.Topic]
	if len(ps) == 0 {
		return
	}
	t.mu.Lock()
	for _, id := range ps {
		if p := t.parts[id]; p != nil {
			p.revoking = true
		}
	}
	closing, hook := t.closed, t.onDrain
	t.mu.Unlock()
	if hook != nil {
		hook(ps)
	}
	if !closing {
		t.waitDrained(ps, time.Now().Add(t.cfg.Lease))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := t.commit(ctx); err != nil {
		t.log.Warn("kafka: committing the settled prefix of partitions being given up failed; their new owner replays from the last commit, and the inbox drops what was applied", "partitions", ps, "error", err)
	}
	t.forget(ps)
	t.mu.Lock()
	hook = t.drained
	t.mu.Unlock()
	if hook != nil {
		hook(ps)
	}
}

// lost forgets partitions the group took away without a revoke (the
// member's session expired): their offsets cannot be committed any more.
func (t *Transport) lost(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	if ps := m[t.cfg.Topic]; len(ps) > 0 {
		t.log.Warn("kafka: partitions lost (the group's session expired); their deliveries in flight will be refused with ErrLeaseLost", "partitions", ps)
		t.forget(ps)
	}
}

func (t *Transport) forget(ps []int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ps {
		delete(t.parts, id)
	}
	t.signal()
}

// waitDrained waits until no delivery of ps is out on a live lease, or
// deadline passes, or the transport closes.
func (t *Transport) waitDrained(ps []int32, deadline time.Time) {
	for {
		t.mu.Lock()
		now := time.Now()
		busy := false
		for _, id := range ps {
			if p := t.parts[id]; p != nil {
				busy = busy || slices.ContainsFunc(p.recs, func(r *rec) bool { return r.st == stOut && now.Before(r.until) })
			}
		}
		ch := t.changed
		t.mu.Unlock()
		if !busy || !now.Before(deadline) {
			return
		}
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-ch:
		case <-timer.C:
		case <-t.done:
		}
		timer.Stop()
	}
}

// advance drops the settled prefix of p and remembers its last record for
// the next commit; t.mu is held.
func (t *Transport) advance(p *part) {
	i := 0
	for i < len(p.recs) && p.recs[i].st == stAcked {
		p.commit = p.recs[i].r
		i++
	}
	if i > 0 {
		clear(p.recs[:i])
		p.recs = p.recs[i:]
		t.signal()
	}
}

// commit commits, for every partition this member owns, the offset after
// its settled prefix, when it moved. Commits are serialised so that none
// rewinds another, and a revoke commits (through commit) before it
// forgets its partitions, so that no commit lands on a partition another
// member owns.
func (t *Transport) commit(ctx context.Context) error {
	t.commitMu.Lock()
	defer t.commitMu.Unlock()
	t.mu.Lock()
	var rs []*kgo.Record
	for _, p := range t.parts {
		if p.commit != nil && p.commit.Offset+1 > p.committed {
			rs = append(rs, p.commit)
		}
	}
	t.mu.Unlock()
	if len(rs) == 0 || t.consumer == nil {
		return nil
	}
	if err := t.consumer.CommitRecords(ctx, rs...); err != nil {
		return fmt.Errorf("kafka: commit offsets of %s: %w", t.cfg.Topic, err)
	}
	t.mu.Lock()
	for _, r := range rs {
		if p := t.parts[r.Partition]; p != nil {
			p.committed = max(p.committed, r.Offset+1)
		}
	}
	t.mu.Unlock()
	return nil
}

// flush commits, every flushEvery, what an Ack could not commit (its
// commit failed during a rebalance, or its context ended): without it an
// idle member would leave its acknowledged records uncommitted until its
// partitions move.
func (t *Transport) flush(ctx context.Context) {
	defer close(t.flushDone)
	tick := time.NewTicker(flushEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t.commitOrRetry(ctx)
	}
}

// commitOrRetry commits, and logs a failure once until a commit succeeds
// again: flush retries every second.
func (t *Transport) commitOrRetry(ctx context.Context) {
	err := t.commit(ctx)
	t.mu.Lock()
	first := err != nil && !t.commitFailing
	t.commitFailing = err != nil
	t.mu.Unlock()
	if first && ctx.Err() == nil && !t.isClosed() {
		t.log.Warn("kafka: committing acknowledged offsets failed; retrying every second (until then a crash replays them, and the inbox drops what was applied)", "topic", t.cfg.Topic, "error", err)
	}
}

// flushEvery is how often flush looks for acknowledged offsets to commit.
const flushEvery = time.Second

package natsjs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/transport"
)

// The headers of JetStream's atomic batch publish (nats-server 2.12 and
// later, ADR-50): every message of a batch carries the batch's ID and its
// position from 1; the last one also carries the commit, and only it is a
// request, answered once the whole batch is stored or refused.
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// atomicBatchMin is the fewest messages Publish sends as a batch. The
// server stages a batch in a store of its own on disk, which costs about
// six sync operations (strace of nats-server 2.15 under sync_interval:
// always: 6 for batches of 5 and of 50 messages, against one per message
// when sent one by one), so smaller calls go one message at a time.
const atomicBatchMin = 8

// atomicBatchMax is the most messages Publish puts in one atomic batch:
// nats-server's default limit (jetstream { limits { max_batch_size } }).
// A server configured lower refuses larger batches, and Publish then sends
// their messages one by one.
const atomicBatchMax = 1000

// errAtomicDisabled is JetStream's error code for a batch sent to a stream
// without allow_atomic.
const errAtomicDisabled jetstream.ErrorCode = 10174

// publishTimeout bounds the wait for the server's answer to a publish.
const publishTimeout = 30 * time.Second

// batcher publishes several messages as JetStream atomic batches, which the
// server stores with a fixed number of syncs per batch under
// sync_interval: always (the setting Idem asks for) instead of one per
// message.
type batcher struct {
	on      atomic.Bool  // the stream allows atomic batches
	batches atomic.Int64 // batches the server committed, for the tests
}

// atomicServer reports whether a server of this version takes atomic
// batches: nats-server 2.12.0 and later.
func atomicServer(version string) bool {
	major, rest, _ := strings.Cut(version, ".")
	minor, _, _ := strings.Cut(rest, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	return err1 == nil && err2 == nil && (ma > 2 || ma == 2 && mi >= 12)
}

// useAtomic turns atomic batches on when the stream Open found or made
// allows them. Open does not change an existing stream: allow_atomic
// raises the stream's API level, which servers older than 2.12 in the
// same cluster do not support, and a downgrade would leave the stream
// unusable; an operator turns it on (or off) on the stream.
func (t *Transport) useAtomic(s jetstream.Stream) {
	t.batch.on.Store(s.CachedInfo().Config.AllowAtomicPublish)
}

// testHookCommit, when set by a test, runs before a batch's commit is
// sent (sent false) and once it is sent, before its answer is awaited
// (sent true).
var testHookCommit func(sent bool)

// batchHeaderBytes bounds what the batch headers add to a message: the
// batch ID (32 hex digits), a sequence of up to 4 digits and the commit.
var batchHeaderBytes = headerSize(nats.Header{
	hdrBatchID:     {strings.Repeat("0", 32)},
	hdrBatchSeq:    {strconv.Itoa(atomicBatchMax)},
	hdrBatchCommit: {"1"},
}) - headerSize(nats.Header{})

// publishBatches publishes msgs as atomic batches of up to atomicBatchMax
// messages, in order, each one when the one before is stored. It returns
// how many messages are stored. When the server refuses a batch (a message
// ID already in the duplicate window or twice in the batch, too many
// batches in flight, a smaller max_batch_size), nothing of that batch is
// stored, and the caller publishes msgs[n:] one by one, where each
// duplicate is dropped on its own. A connection error or ctx ending is
// returned: the batch may or may not have been stored, and a retry
// publishes it again under the same IDs. A message that fits in a NATS
// message only without the batch headers ends the batching there.
func (t *Transport) publishBatches(ctx context.Context, msgs []*nats.Msg) (n int, err error) {
	for n < len(msgs) {
		chunk := msgs[n:min(len(msgs), n+atomicBatchMax)]
		for i, m := range chunk {
			if int64(headerSize(m.Header)+batchHeaderBytes+len(m.Data)) > t.maxPayload {
				chunk = chunk[:i]
				break
			}
		}
		if len(chunk) < atomicBatchMin {
			return n, nil
		}
		refused, err := t.publishBatch(ctx, chunk)
		if refused {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n += len(chunk)
	}
	return n, nil
}

// publishBatch sends chunk as one atomic batch and waits for the server's
// answer. refused reports that the server stored nothing of it (it drops
// a batch that is never committed), which includes a message the server
// now finds too large (a restart with a smaller max_payload): the caller
// then sends the messages one by one, and that path reports ErrTooLarge.
// The messages sent are copies with the batch headers: the library may
// send the commit again after a no-responders answer, after publishBatch
// returned.
func (t *Transport) publishBatch(ctx context.Context, chunk []*nats.Msg) (refused bool, err error) {
	var id [16]byte
	_, _ = rand.Read(id[:])
	bid := hex.EncodeToString(id[:])
	last := len(chunk) - 1
	var commit *nats.Msg
	for i, m := range chunk {
		b := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: maps.Clone(m.Header)}
		b.Header.Set(hdrBatchID, bid)
		b.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if i < last {
			if err := t.nc.PublishMsg(b); err != nil {
				return errors.Is(err, nats.ErrMaxPayload), fmt.Errorf("natsjs: publish batch: %w", err)
			}
			continue
		}
		b.Header.Set(hdrBatchCommit, "1")
		commit = b
	}
	// The commit goes as an asynchronous JetStream publish: the library
	// fails it with nats.ErrDisconnected when the connection drops, where
	// a plain request would wait for an answer that cannot come.
	if testHookCommit != nil {
		testHookCommit(false)
	}
	f, err := t.publishAsync(ctx, commit, fmt.Sprintf("commit batch of %d messages", len(chunk)), noneOwn)
	if err != nil {
		return errors.Is(err, nats.ErrMaxPayload), err
	}
	if testHookCommit != nil {
		testHookCommit(true)
	}
	return t.awaitCommit(ctx, f, len(chunk))
}

// awaitCommit waits for the server's answer to the commit of a batch of n
// messages; refused reports an error answer, which stores nothing.
func (t *Transport) awaitCommit(ctx context.Context, f jetstream.PubAckFuture, n int) (refused bool, err error) {
	err = t.await(ctx, f, fmt.Sprintf("commit batch of %d messages", n))
	var api *jetstream.APIError
	switch {
	case err == nil:
		t.batch.batches.Add(1)
		return false, nil
	case !errors.As(err, &api):
		return false, err
	case api.ErrorCode == errAtomicDisabled && t.batch.on.CompareAndSwap(true, false):
		t.log.Warn("the stream no longer allows atomic batch publishing; publishing one message at a time", "stream", t.cfg.Stream)
	}
	return true, nil
}

// The pause of a publish that finds the window of unanswered asynchronous
// publishes full with none of its own in it: it doubles from stallPauseMin
// to stallPauseMax. Each try already waits up to the library's stall wait
// (200 ms) for a place to free, woken when one does, so the pause only
// spaces the tries out.
const (
	stallPauseMin = time.Millisecond
	stallPauseMax = 100 * time.Millisecond
)

// publishEach publishes msgs, the messages of envs, one by one as
// asynchronous JetStream publishes, in order, and waits for every answer,
// returning the first error.
func (t *Transport) publishEach(ctx context.Context, msgs []*nats.Msg, envs []transport.Envelope) error {
	c := eachCall{t: t, msgs: msgs, envs: envs, futures: make([]jetstream.PubAckFuture, 0, len(msgs))}
	for i := range msgs {
		if err := c.send(ctx, i); err != nil {
			return err
		}
	}
	return c.settle(ctx, len(msgs))
}

// eachCall is one publishEach: the answers to await of the messages sent
// so far, of which the first settled were awaited.
type eachCall struct {
	t       *Transport
	msgs    []*nats.Msg
	envs    []transport.Envelope
	futures []jetstream.PubAckFuture
	settled int
}

// send sends msgs[i], waiting, while the window is full, for the oldest
// message of this call not yet answered.
func (c *eachCall) send(ctx context.Context, i int) error {
	m := c.msgs[i]
	f, err := c.t.publishAsync(ctx, m, "publish "+c.envs[i].ID, c.settleOldest, jetstream.WithMsgID(m.Header.Get(jetstream.MsgIDHeader)), jetstream.WithExpectStream(c.t.cfg.Stream))
	if err != nil {
		return err
	}
	c.futures = append(c.futures, f)
	return nil
}

// settleOldest awaits the answer to the oldest message of this call not
// yet answered; none reports that every message sent was.
func (c *eachCall) settleOldest(ctx context.Context) (none bool, err error) {
	if c.settled == len(c.futures) {
		return true, nil
	}
	return false, c.settle(ctx, c.settled+1)
}

// settle awaits the answers to the first n messages. A message the server
// reports "in process" (a copy being replicated) is sent again until it
// answers otherwise.
func (c *eachCall) settle(ctx context.Context, n int) error {
	for ; c.settled < n; c.settled++ {
		i := c.settled
		err := c.t.await(ctx, c.futures[i], "publish "+c.envs[i].ID)
		if inProcess(err) {
			err = c.t.publishAfterInProcess(ctx, c.msgs[i], c.envs[i].ID)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// publishAsync sends m as an asynchronous JetStream publish. The
// JetStream context, which every goroutine of t shares, lets a bounded
// number of publishes await their answer; when a slow server fills that
// window, the library refuses m without sending it
// (jetstream.ErrTooManyStalledMsgs). That is backpressure, not an error:
// publishAsync calls free, which awaits the answer to one of the caller's
// own publishes, or reports none when the caller has none outstanding,
// and then it pauses instead; and it sends m again, with its ID. ctx and
// Close end the wait, and an error of free is returned as it is. The
// library's refusal of m for another reason is wrapped with what; one for
// its size also wraps ErrTooLarge.
func (t *Transport) publishAsync(ctx context.Context, m *nats.Msg, what string, free func(context.Context) (none bool, err error), opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	pause := stallPauseMin
	for {
		f, err := t.js.PublishMsgAsync(m, opts...)
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return f, t.refused(err, what)
		}
		t.stalls.Add(1)
		none, err := free(ctx)
		if err != nil {
			return nil, err
		}
		if none {
			if err := t.pause(ctx, pause); err != nil {
				return nil, err
			}
			pause = min(2*pause, stallPauseMax)
		}
	}
}

// refused wraps the library's refusal to send a message with what; nil
// stays nil.
func (t *Transport) refused(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, nats.ErrMaxPayload): // a server with a smaller max_payload than the one Open read
		return t.closedOr(fmt.Errorf("natsjs: %s: %w: %w (the server's max_payload is now %d bytes)", what, ErrTooLarge, err, t.nc.MaxPayload()))
	default:
		return t.closedOr(fmt.Errorf("natsjs: %s: %w", what, err))
	}
}

// noneOwn is the free of a caller with no publishes of its own awaiting
// their answer.
func noneOwn(context.Context) (bool, error) { return true, nil }

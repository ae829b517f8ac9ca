package natsjs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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
// server stores with one fsync per batch under sync_interval: always (the
// setting Idem asks for) instead of one per message.
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

// enableAtomic turns atomic batches on for a stream that Open found: it
// asks the server to allow them on the stream when it can take them and
// the stream does not allow them yet (a stream made by an older version of
// this package). A server that refuses (permissions, an older server)
// leaves Publish sending one message at a time, as before.
func (t *Transport) enableAtomic(ctx context.Context, s jetstream.Stream) {
	cfg := s.CachedInfo().Config
	if cfg.AllowAtomicPublish {
		t.batch.on.Store(true)
		return
	}
	if !atomicServer(t.nc.ConnectedServerVersion()) {
		return
	}
	cfg.AllowAtomicPublish = true
	if _, err := t.js.UpdateStream(ctx, cfg); err != nil {
		t.log.Warn("could not allow atomic batch publishing on the stream; publishing one message at a time (one fsync each)", "stream", cfg.Name, "error", err)
		return
	}
	t.batch.on.Store(true)
}

// testHookCommitSent, when set by a test, runs once a batch's commit is
// sent and before its answer is awaited.
var testHookCommitSent func()

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
		if len(chunk) < 2 {
			return n, nil
		}
		refused, err := t.publishBatch(ctx, chunk)
		if err != nil || refused {
			return n, err
		}
		n += len(chunk)
	}
	return n, nil
}

// publishBatch sends chunk as one atomic batch and waits for the server's
// answer. refused reports an answer that stored nothing.
func (t *Transport) publishBatch(ctx context.Context, chunk []*nats.Msg) (refused bool, err error) {
	var id [16]byte
	_, _ = rand.Read(id[:])
	bid := hex.EncodeToString(id[:])
	defer func() {
		for _, m := range chunk {
			m.Header.Del(hdrBatchID)
			m.Header.Del(hdrBatchSeq)
			m.Header.Del(hdrBatchCommit)
		}
	}()
	last := len(chunk) - 1
	for i, m := range chunk {
		m.Header.Set(hdrBatchID, bid)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if i < last {
			if err := t.nc.PublishMsg(m); err != nil {
				return false, fmt.Errorf("natsjs: publish batch: %w", err)
			}
		}
	}
	chunk[last].Header.Set(hdrBatchCommit, "1")
	// The commit goes as an asynchronous JetStream publish: the library
	// fails it with nats.ErrDisconnected when the connection drops, where
	// a plain request would wait for an answer that cannot come.
	f, err := t.js.PublishMsgAsync(chunk[last])
	if err != nil {
		return false, fmt.Errorf("natsjs: commit batch of %d messages: %w", len(chunk), err)
	}
	if testHookCommitSent != nil {
		testHookCommitSent()
	}
	select {
	case <-f.Ok():
	case err := <-f.Err():
		var api *jetstream.APIError
		if !errors.As(err, &api) {
			return false, fmt.Errorf("natsjs: commit batch of %d messages: %w", len(chunk), err)
		}
		if api.ErrorCode == errAtomicDisabled && t.batch.on.CompareAndSwap(true, false) {
			t.log.Warn("the stream no longer allows atomic batch publishing; publishing one message at a time", "stream", t.cfg.Stream)
		}
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-t.closed:
		return false, transport.ErrClosed
	}
	t.batch.batches.Add(1)
	return false, nil
}

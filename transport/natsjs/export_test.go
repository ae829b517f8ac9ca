package natsjs

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/transport"
)

// Held reports how many messages t holds for a later Receive (brought by
// pull requests a Receive gave up on), for the tests.
func (t *Transport) Held() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, left := range t.leftovers {
		n += len(left)
	}
	return n
}

// AtomicBatchMax is the most messages Publish puts in one atomic batch.
const AtomicBatchMax = atomicBatchMax

// AtomicBatchMin is the fewest messages Publish sends as a batch.
const AtomicBatchMin = atomicBatchMin

// Batches reports how many atomic batches the server committed for t.
func (t *Transport) Batches() int64 { return t.batch.batches.Load() }

// WireSize is the size of env as a NATS message (headers and body),
// without batch headers.
func (t *Transport) WireSize(env transport.Envelope) (int, error) {
	m, err := t.message(&env)
	if err != nil {
		return 0, err
	}
	return headerSize(m.Header) + len(m.Data), nil
}

// SetCommitHook sets a function that runs before a batch's commit is sent
// (sent false) and once it is sent, before its answer is awaited (sent
// true); nil removes it.
func SetCommitHook(f func(sent bool)) { testHookCommit = f }

// StreamState reads the state of t's stream from the server. A Publish
// that returned is counted in it: the server stores a message before it
// acknowledges the publish. Pending is no substitute straight after a
// Publish or an Ack, since the stream's consumers count new messages and
// acks asynchronously.
func (t *Transport) StreamState(ctx context.Context) (jetstream.StreamState, error) {
	s, err := t.js.Stream(ctx, t.cfg.Stream)
	if err != nil {
		return jetstream.StreamState{}, err
	}
	return s.CachedInfo().State, nil
}

// HeldLeaseLeft reports the shortest lease left, by t's clock, of the
// messages t holds for a later Receive, and whether it holds any.
func (t *Transport) HeldLeaseLeft() (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	least, held := time.Duration(0), false
	for _, left := range t.leftovers {
		for _, p := range left {
			if d := time.Until(p.start.Add(t.cfg.AckWait)); !held || d < least {
				least, held = d, true
			}
		}
	}
	return least, held
}

// LimitAsyncPending replaces t's JetStream context with one that allows
// at most n asynchronous publishes awaiting their answer (the library's
// default is 4000), so that a test fills the window with a few messages.
// Call it before t publishes.
func (t *Transport) LimitAsyncPending(n int) error {
	js, err := jetstream.New(t.nc, jetstream.WithPublishAsyncTimeout(publishTimeout), jetstream.WithPublishAsyncMaxPending(n))
	if err != nil {
		return err
	}
	t.js = js
	return nil
}

// AsyncPending reports how many of t's asynchronous publishes await
// their answer.
func (t *Transport) AsyncPending() int { return t.js.PublishAsyncPending() }

// Stalls reports how often a publish of t found the window of unanswered
// asynchronous publishes full.
func (t *Transport) Stalls() int64 { return t.stalls.Load() }

package natsjs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
	"github.com/idemhq/idem/transport/natsjs/natsembed"
)

func envs(prefix string, n int) []transport.Envelope {
	out := make([]transport.Envelope, n)
	for i := range out {
		out[i] = transport.Envelope{ID: fmt.Sprintf("%s-%d", prefix, i), Type: "A", CorrelationID: fmt.Sprintf("k-%d", i%7), SentAt: time.Now(), Body: []byte(`{}`)}
	}
	return out
}

// receiveIDs receives until want distinct IDs arrived (acking them), and
// fails on a copy of one.
func receiveIDs(t *testing.T, tr *natsjs.Transport, want int) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got := map[string]bool{}
	for len(got) < want {
		ds, err := tr.Receive(ctx, want)
		if err != nil {
			t.Fatalf("received %d of %d: %v", len(got), want, err)
		}
		for _, d := range ds {
			if got[d.Envelope.ID] {
				t.Errorf("%s delivered twice", d.Envelope.ID)
			}
			got[d.Envelope.ID] = true
		}
		if err := tr.Ack(ctx, ds); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

// Publish stores a call's messages as atomic batches of up to
// AtomicBatchMax (one fsync each under sync_interval: always), in order;
// a single message goes on its own.
func TestPublishSendsAtomicBatches(t *testing.T) {
	tr := open(t, natsjs.Config{Partitions: 4})
	ctx := t.Context()
	if err := tr.Publish(ctx, envs("one", 5)); err != nil {
		t.Fatal(err)
	}
	if got := tr.Batches(); got != 1 {
		t.Fatalf("published 5 messages in one call: %d atomic batches, want 1", got)
	}
	if err := tr.Publish(ctx, envs("many", natsjs.AtomicBatchMax+2)); err != nil {
		t.Fatal(err)
	}
	if got := tr.Batches(); got != 3 {
		t.Fatalf("published %d messages in one call: %d atomic batches in all, want 3", natsjs.AtomicBatchMax+2, got)
	}
	if err := tr.Publish(ctx, envs("single", 1)); err != nil {
		t.Fatal(err)
	}
	if got := tr.Batches(); got != 3 {
		t.Errorf("a single message went as a batch: %d batches, want 3", got)
	}
	if got := receiveIDs(t, tr, natsjs.AtomicBatchMax+8); len(got) != natsjs.AtomicBatchMax+8 {
		t.Errorf("received %d messages, want %d", len(got), natsjs.AtomicBatchMax+8)
	}
}

// A batch that repeats an ID the stream has seen (a relay's retry after a
// lost answer) or repeats one of its own is refused whole by the server;
// Publish then sends its messages one by one, and the duplicate window
// drops the copies: every message is stored once.
func TestPublishBatchWithDuplicatesStoresEachOnce(t *testing.T) {
	tr := open(t, natsjs.Config{Partitions: 4})
	ctx := t.Context()
	first := envs("dup", 3)
	if err := tr.Publish(ctx, first[:1]); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, first); err != nil {
		t.Fatalf("batch with an ID already stored: %v", err)
	}
	again := append(envs("twice", 2), envs("twice", 2)...)
	if err := tr.Publish(ctx, again); err != nil {
		t.Fatalf("batch repeating its own IDs: %v", err)
	}
	if got := tr.Batches(); got != 0 {
		t.Errorf("%d batches committed, want 0: both held duplicates", got)
	}
	ready, _, err := tr.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ready != 5 {
		t.Fatalf("%d messages in the stream, want 5 (dup-0..2, twice-0..1)", ready)
	}
	receiveIDs(t, tr, 5)
}

// A stream made before atomic batches (by an earlier version of this
// package) is given allow_atomic when Open finds it.
func TestOpenAllowsAtomicBatchesOnOlderStream(t *testing.T) {
	srv := sharedServer(t)
	ctx := t.Context()
	stream := randName("OLD_")
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	tr := open(t, natsjs.Config{Stream: stream, Partitions: 4})
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if !s.CachedInfo().Config.AllowAtomicPublish {
		t.Fatal("Open left allow_atomic off on a stream of an earlier version")
	}
	if err := tr.Publish(ctx, envs("old", 4)); err != nil {
		t.Fatal(err)
	}
	if got := tr.Batches(); got != 1 {
		t.Errorf("%d atomic batches, want 1", got)
	}
}

// An operator who turns allow_atomic off on a running stream loses
// nothing: the refused batch goes out one message at a time, and so does
// every later Publish.
func TestPublishAfterAtomicTurnedOff(t *testing.T) {
	srv := sharedServer(t)
	ctx := t.Context()
	stream := randName("OFF_")
	tr := open(t, natsjs.Config{Stream: stream, Partitions: 4})
	if err := tr.Publish(ctx, envs("on", 2)); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, envs("off", 3)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, envs("later", 3)); err != nil {
		t.Fatal(err)
	}
	if got := tr.Batches(); got != 1 {
		t.Errorf("%d atomic batches, want 1 (before it was turned off)", got)
	}
	receiveIDs(t, tr, 8)
}

// Messages that fit in max_payload only without the batch headers (a few
// dozen bytes) are still published: one at a time.
func TestPublishNearMaxPayloadFallsBackToSingleMessages(t *testing.T) {
	const maxPayload = 64 << 10
	srv, err := natsembed.Start(t.Context(), t.TempDir(), &natsembed.Config{MaxPayload: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	tr, err := natsjs.Open(t.Context(), srv.URL(), &natsjs.Config{Stream: randName("NEAR_"), Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx := t.Context()
	near := func(id string) transport.Envelope {
		// Pad a header until the message is 10 bytes under max_payload.
		env := engineLike(id, bytes.Repeat([]byte("b"), tr.MaxMessageBytes()))
		env.Headers["x-pad"] = ""
		size, err := tr.WireSize(env)
		if err != nil {
			t.Fatal(err)
		}
		env.Headers["x-pad"] = strings.Repeat("p", maxPayload-10-size)
		if size, err = tr.WireSize(env); err != nil || size != maxPayload-10 {
			t.Fatalf("padded message: %d bytes (%v), want %d", size, err, maxPayload-10)
		}
		return env
	}
	if err := tr.Publish(ctx, []transport.Envelope{near("n-1"), near("n-2"), near("n-3")}); err != nil {
		t.Fatalf("Publish of messages 10 bytes under max_payload: %v", err)
	}
	if got := tr.Batches(); got != 0 {
		t.Errorf("%d atomic batches, want 0: the batch headers do not fit", got)
	}
	receiveIDs(t, tr, 3)
}

// A batch whose commit was sent when the server went away fails at once
// with nats.ErrDisconnected, as an asynchronous publish does, rather than
// waiting for an answer that cannot come: the engine's settle publishes
// after commit and must not hold up a Stop (the relay sends again).
func TestBatchCommitFailsWhenTheServerGoesAway(t *testing.T) {
	srv, err := natsembed.Start(t.Context(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	tr, err := natsjs.Open(t.Context(), srv.URL(), &natsjs.Config{Stream: randName("GONE_"), Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	natsjs.SetCommitSentHook(srv.Shutdown)
	defer natsjs.SetCommitSentHook(nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err = tr.Publish(ctx, envs("gone", 3))
	if !errors.Is(err, nats.ErrDisconnected) {
		t.Fatalf("Publish while the server went away: got %v, want an error wrapping nats.ErrDisconnected", err)
	}
}

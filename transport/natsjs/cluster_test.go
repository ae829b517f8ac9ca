package natsjs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
	"github.com/idemhq/idem/transport/natsjs/natsembed"
	"github.com/idemhq/idem/transport/transporttest"
)

// startCluster starts a three-node JetStream cluster in this process,
// stopped when the test ends.
func startCluster(t *testing.T) *natsembed.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := natsembed.StartCluster(ctx, t.TempDir(), "idemtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	return c
}

// The transport's contract holds on a three-node cluster with streams of
// three replicas, as on one server.
func TestConformanceOnThreeNodeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("the cluster suite runs in scripts/test, not with -short")
	}
	c := startCluster(t)
	const lease = time.Second
	transporttest.Run(t, transporttest.Features{Lease: lease, Fencing: true, NativeDelay: true, Partitioned: true, SizeLimit: true, Pending: true, PublishDedup: true}, func(t *testing.T) transport.Transport {
		stream := randName("C_")
		tr, err := natsjs.Open(t.Context(), c.URL(), &natsjs.Config{Stream: stream, AckWait: lease, Partitions: 12, Replicas: 3})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() {
			_ = tr.Close()
			deleteStream(t, c.URL(), stream)
		})
		return tr
	})
}

// publishUntilStored publishes envs, again under the same IDs while the
// cluster answers with an error (a stream leader being elected): the
// publisher's retry that the transport's deduplication makes safe. It
// fails the test if they are not stored within a minute.
func publishUntilStored(t *testing.T, tr *natsjs.Transport, envs []transport.Envelope) (retries int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		err := tr.Publish(ctx, envs)
		if err == nil {
			return retries
		}
		if ctx.Err() != nil {
			t.Fatalf("publish %d envelopes: not stored within a minute: %v", len(envs), err)
		}
		retries++
	}
}

// receiveEach receives and acknowledges until every ID in want was
// delivered, retrying receive errors while the cluster elects a leader,
// and returns how often each ID was delivered. It fails the test after a
// minute.
func receiveEach(t *testing.T, tr *natsjs.Transport, want map[string]bool) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	got := map[string]int{}
	missing := len(want)
	for missing > 0 {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		ds, err := tr.Receive(rctx, 64)
		rcancel()
		if ctx.Err() != nil {
			t.Fatalf("after a minute %d of %d messages were still not delivered (last receive error: %v)", missing, len(want), err)
		}
		if err != nil || len(ds) == 0 {
			continue
		}
		for _, d := range ds {
			if got[d.Envelope.ID] == 0 && want[d.Envelope.ID] {
				missing--
			}
			got[d.Envelope.ID]++
		}
		// An ack lost to the leader's election is redelivered after the
		// lease: counted above, acknowledged again then.
		_ = tr.Ack(ctx, ds)
	}
	return got
}

func envelopes(prefix string, n int) ([]transport.Envelope, map[string]bool) {
	envs := make([]transport.Envelope, n)
	ids := map[string]bool{}
	for i := range envs {
		id := fmt.Sprintf("%s-%03d", prefix, i)
		envs[i] = transport.Envelope{ID: id, Type: "Ping", CorrelationID: fmt.Sprintf("k-%d", i%7), SentAt: time.Now()}
		ids[id] = true
	}
	return envs, ids
}

// The node leading the stream is killed with messages stored and not yet
// delivered, and while more are published: a new leader is elected, every
// message that Publish reported stored is delivered, a publish retried
// under the same IDs across the election is stored once (the stream's
// deduplication), and the killed node comes back and catches up.
func TestStreamLeaderKilled(t *testing.T) {
	c := startCluster(t)
	stream := randName("L_")
	const lease = time.Second
	tr, err := natsjs.Open(t.Context(), c.URL(), &natsjs.Config{Stream: stream, AckWait: lease, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	before, want := envelopes("before", 100)
	publishUntilStored(t, tr, before)

	leader := c.StreamLeader(stream)
	if leader < 0 {
		t.Fatalf("no node leads stream %s", stream)
	}
	c.Kill(leader)
	after, wantAfter := envelopes("after", 100)
	retries := publishUntilStored(t, tr, after)
	for id := range wantAfter {
		want[id] = true
	}
	// The same batch again, as a publisher that lost the answer would send
	// it: the stream drops the copies.
	publishUntilStored(t, tr, after)

	got := receiveEach(t, tr, want)
	for id, n := range got {
		if !want[id] {
			t.Errorf("delivered %s, which was never published", id)
		}
		if n > 1 {
			t.Logf("%s delivered %d times (an ack lost to the election)", id, n)
		}
	}
	newLeader := c.StreamLeader(stream)
	if newLeader < 0 || newLeader == leader {
		t.Errorf("stream leader after the kill: node %d, want another node than the killed %d", newLeader, leader)
	}
	if err := c.Restart(t.Context(), leader); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stream drained", func() bool {
		ready, unacked, err := tr.Pending(t.Context())
		return err == nil && ready == 0 && unacked == 0
	})
	t.Logf("leader %s killed: %d publish retries across the election; new leader %s", c.NodeName(leader), retries, c.NodeName(newLeader))
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
}

// Copies of a message published at once through two connections, as two
// relays or a retrying client send them: on a cluster the second reaches
// the stream leader while the first is still being replicated, and the
// server answers "duplicate message id is in process" (409, error code
// 10158) rather than whether it stored it. Publish waits for the first
// copy's outcome and returns nil for both, and the stream keeps one.
func TestConcurrentCopiesOnACluster(t *testing.T) {
	c := startCluster(t)
	stream := randName("D_")
	var trs [2]*natsjs.Transport
	for i := range trs {
		tr, err := natsjs.Open(t.Context(), c.URL(), &natsjs.Config{Stream: stream, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		trs[i] = tr
	}
	const rounds, n = 5, 40
	for round := range rounds {
		envs, _ := envelopes(fmt.Sprintf("r%d", round), n)
		errs := make(chan error, len(trs))
		for _, tr := range trs {
			go func() { errs <- tr.Publish(t.Context(), envs) }()
		}
		for range trs {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: a copy's Publish: %v; want nil (the other copy is stored)", round, err)
			}
		}
	}
	ready, unacked, err := trs[0].Pending(t.Context())
	if err != nil || ready != rounds*n || unacked != 0 {
		t.Fatalf("Pending = %d ready, %d unacked, %v; want %d stored once each", ready, unacked, err, rounds*n)
	}
}

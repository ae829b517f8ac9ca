package transporttest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
)

// The Shared cases check transport.SharedConsumer (Features.Shared).

// receiveShare is receivePartition through ReceiveShare with a fixed share.
func receiveShare(t *testing.T, tr transport.Transport, sc transport.SharedConsumer, sh transport.Share, want map[string]bool, why func(id string) string) {
	t.Helper()
	receivePartition(t, tr, shareAsPartition{sc, sh}, sh.Part, sh.Parts, want, promptWait, why)
}

// shareAsPartition serves ReceiveShare of one share as ReceivePartition,
// for receivePartition.
type shareAsPartition struct {
	sc transport.SharedConsumer
	sh transport.Share
}

func (s shareAsPartition) ReceivePartition(ctx context.Context, max, _, _ int) ([]transport.Delivery, error) {
	return s.sc.ReceiveShare(ctx, max, func() transport.Share { return s.sh })
}

// sharedReceive: with a StealAfter that never passes, ReceiveShare hands
// out exactly the messages of its share's range (transport.ShareOf), for
// each of 3 shares, the last first.
func (s *suite) sharedReceive(t *testing.T) {
	tr := s.setup(t)
	sc := capability[transport.SharedConsumer](t, tr, s.f.Shared, "Shared", "transport.SharedConsumer")
	const parts = 3
	envs := envelopes("share", 36)
	want := make([]map[string]bool, parts)
	where := map[string]string{}
	for i := range want {
		want[i] = map[string]bool{}
	}
	for _, e := range envs {
		p := transport.ShareOf(transport.PartitionKey(&e), parts)
		want[p][e.ID] = true
		where[e.ID] = fmt.Sprintf("%s (correlation ID %q) belongs to share %d", e.ID, e.CorrelationID, p)
	}
	for p := range want {
		if len(want[p]) == 0 {
			t.Fatalf("transporttest: no envelope of the case falls in share %d; change the case", p)
		}
	}
	publish(t, tr, envs...)
	for p := parts - 1; p >= 0; p-- {
		receiveShare(t, tr, sc, transport.Share{Part: p, Parts: parts, StealAfter: time.Hour}, want[p], func(id string) string { return where[id] })
	}
}

// sharedSteal: a share with nothing of its own visible takes another
// share's message once it has been visible for StealAfter, not before,
// and its own first when it has some; a share of Parts below 2 is the
// whole queue; a Part out of range is refused.
func (s *suite) sharedSteal(t *testing.T) {
	tr := s.setup(t)
	sc := capability[transport.SharedConsumer](t, tr, s.f.Shared, "Shared", "transport.SharedConsumer")
	envs := envelopes("steal", 8)
	var other transport.Envelope
	for _, e := range envs {
		if transport.ShareOf(transport.PartitionKey(&e), 2) == 1 {
			other = e
			break
		}
	}
	if other.ID == "" {
		t.Fatal("transporttest: no envelope of the case falls in share 1 of 2; change the case")
	}
	publish(t, tr, other)
	quiet, cancel := context.WithTimeout(t.Context(), s.f.quietWait())
	defer cancel()
	if ds, err := sc.ReceiveShare(quiet, 1, func() transport.Share { return transport.Share{Part: 0, Parts: 2, StealAfter: time.Hour} }); err == nil {
		t.Fatalf("ReceiveShare of share 0 of 2, StealAfter an hour: got %s, want nothing (share 1's message is not visible for an hour yet)", describe(ds...))
	}
	receiveShare(t, tr, sc, transport.Share{Part: 0, Parts: 2, StealAfter: 100 * time.Millisecond},
		map[string]bool{other.ID: true}, func(id string) string { return id + " is share 1's, visible past StealAfter" })
	var own, theirs transport.Envelope
	for _, e := range envelopes("first", 16) {
		switch transport.ShareOf(transport.PartitionKey(&e), 2) {
		case 0:
			own = e
		case 1:
			theirs = e
		}
	}
	if own.ID == "" || theirs.ID == "" {
		t.Fatal("transporttest: the case's envelopes do not fall in both shares of 2; change the case")
	}
	publish(t, tr, theirs, own) // theirs first, stealable at once
	first, cancel2 := context.WithTimeout(t.Context(), promptWait)
	defer cancel2()
	ds, err := sc.ReceiveShare(first, 1, func() transport.Share { return transport.Share{Part: 0, Parts: 2, StealAfter: time.Nanosecond} })
	if err != nil || len(ds) != 1 || ds[0].Envelope.ID != own.ID {
		t.Fatalf("ReceiveShare(1) of share 0 of 2 with its own message and a stealable one: got %s, %v, want its own, %s", describe(ds...), err, own.ID)
	}
	receiveShare(t, tr, sc, transport.Share{Part: 0, Parts: 2, StealAfter: time.Nanosecond}, map[string]bool{theirs.ID: true}, func(id string) string { return id + " is share 1's, stealable" })
	if err := tr.Ack(t.Context(), ds); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	whole := envelopes("whole", 3)
	publish(t, tr, whole...)
	want := map[string]bool{}
	for _, e := range whole {
		want[e.ID] = true
	}
	receiveShare(t, tr, sc, transport.Share{Parts: 1}, want, func(id string) string { return id + " (Parts 1: the whole queue)" })
	ctx, cancel := context.WithTimeout(t.Context(), promptWait)
	defer cancel()
	if ds, err := sc.ReceiveShare(ctx, 1, func() transport.Share { return transport.Share{Part: 2, Parts: 2} }); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ReceiveShare of part 2 of 2: got %d deliveries, %v, want an error naming the share", len(ds), err)
	}
}

// sharedFollowsChange: a ReceiveShare waiting under one share follows a
// change of share (it calls share before each attempt): a message of the
// new share published while it waits is handed out.
func (s *suite) sharedFollowsChange(t *testing.T) {
	tr := s.setup(t)
	sc := capability[transport.SharedConsumer](t, tr, s.f.Shared, "Shared", "transport.SharedConsumer")
	var mine transport.Envelope
	for _, e := range envelopes("follow", 8) {
		if transport.ShareOf(transport.PartitionKey(&e), 2) == 1 {
			mine = e
			break
		}
	}
	if mine.ID == "" {
		t.Fatal("transporttest: no envelope of the case falls in share 1 of 2; change the case")
	}
	var part atomic.Int64 // share 0 of 2 first
	asked := make(chan struct{}, 1)
	share := func() transport.Share {
		select {
		case asked <- struct{}{}:
		default:
		}
		return transport.Share{Part: int(part.Load()), Parts: 2, StealAfter: time.Hour}
	}
	type result struct {
		ds  []transport.Delivery
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), promptWait)
		defer cancel()
		ds, err := sc.ReceiveShare(ctx, 1, share)
		done <- result{ds, err}
	}()
	<-asked // the receive has asked for its share once
	part.Store(1)
	publish(t, tr, mine)
	r := <-done
	if r.err != nil || len(r.ds) != 1 || r.ds[0].Envelope.ID != mine.ID {
		t.Fatalf("a receive waiting under share 0 of 2, moved to share 1: got %s, %v, want %s", describe(r.ds...), r.err, mine.ID)
	}
	if err := tr.Ack(t.Context(), r.ds); err != nil {
		t.Fatalf("Ack: %v", err)
	}
}

package idem

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

type benchState struct {
	N int `json:"n"`
}

type benchInc struct {
	Key string `json:"key"`
}

type benchIncremented struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

func benchMachine() *saga.Machine[benchState] {
	m := saga.New[benchState]("bench")
	open := m.State("Open")
	inc := saga.NewEvent[benchInc](m, func(e benchInc) string { return e.Key })
	step := func(c *saga.Context[benchState], e benchInc) error {
		c.Data.N++
		c.Publish(benchIncremented{Key: e.Key, N: c.Data.N})
		return nil
	}
	m.Initially(saga.When(inc).Then(step).TransitionTo(open))
	m.During(open, saga.When(inc).Then(step))
	return m
}

// BenchmarkEngine measures in-memory transitions per second through the
// whole pipeline (receive, decode, load, dedup, apply, commit with inbox,
// outbox and journal, ack, publish) at several batch sizes. One op is one
// message; every transition also emits one message. Keys repeat, so most
// transitions update an existing saga.
//
//	go test -run '^$' -bench BenchmarkEngine -benchmem .
func BenchmarkEngine(b *testing.B) {
	for _, batch := range []int{1, 16, 128} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			benchEngine(b, batch)
		})
	}
}

func benchEngine(b *testing.B, batch int) {
	ctx := context.Background()
	st := memstore.New(nil)
	mt := memtransport.New(&memtransport.Config{Lease: time.Minute})
	defer mt.Close()
	e, err := NewEngine(st, &dropPublished{mt}, &Config{BatchSize: batch, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Register(benchMachine()); err != nil {
		b.Fatal(err)
	}
	envs := make([]Envelope, b.N)
	for i := range envs {
		envs[i], _ = e.NewEnvelope("m-"+strconv.Itoa(i), benchInc{Key: "k-" + strconv.Itoa(i%1024)})
	}
	if err := mt.Publish(ctx, envs); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	if err := e.Start(ctx); err != nil {
		b.Fatal(err)
	}
	for mt.Unsettled() > 0 {
		time.Sleep(50 * time.Microsecond) // polling a condition
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if err := e.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	if got := e.Stats().Applied; got != int64(b.N) {
		b.Fatalf("applied %d, want %d", got, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "transitions/s")
}

// dropPublished keeps emitted messages out of the benchmark's queue, as if
// they went to another service.
type dropPublished struct{ *memtransport.Transport }

func (d *dropPublished) Publish(ctx context.Context, msgs []Envelope) error {
	if len(msgs) > 0 && msgs[0].Type != saga.MessageType(benchInc{}) {
		return nil
	}
	return d.Transport.Publish(ctx, msgs)
}

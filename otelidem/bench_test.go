package otelidem_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/otelidem"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// dropShip keeps the order saga's commands out of the benchmark's queue.
type dropShip struct{ *memtransport.Transport }

func (d dropShip) Publish(ctx context.Context, msgs []transport.Envelope) error {
	if len(msgs) > 0 && msgs[0].Type == shipType {
		return nil
	}
	return d.Transport.Publish(ctx, msgs)
}

// BenchmarkTracing measures the engine's cost per message on the in-memory
// store, without a tracer and with otelidem (every span sampled, batched
// and discarded). One op is one message whose transition emits a command.
//
//	go test -run '^$' -bench BenchmarkTracing -benchmem ./otelidem/
func BenchmarkTracing(b *testing.B) {
	for _, traced := range []bool{false, true} {
		b.Run("traced="+strconv.FormatBool(traced), func(b *testing.B) {
			var tracer idem.Tracer
			if traced {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
				defer tp.Shutdown(context.Background())
				tracer = otelidem.NewTracer(otelidem.WithTracerProvider(tp))
			}
			ctx := context.Background()
			st := memstore.New(nil)
			defer st.Close()
			mt := memtransport.New(&memtransport.Config{Lease: time.Minute})
			defer mt.Close()
			e, err := idem.NewEngine(st, dropShip{mt}, &idem.Config{BatchSize: 128, Tracer: tracer, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			if err := e.Register(orderMachine()); err != nil {
				b.Fatal(err)
			}
			envs := make([]idem.Envelope, b.N)
			for i := range envs {
				envs[i], _ = e.NewEnvelope("m-"+strconv.Itoa(i), Placed{Order: "o-" + strconv.Itoa(i)})
			}
			if err := mt.Publish(ctx, envs); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			if err := e.Start(ctx); err != nil {
				b.Fatal(err)
			}
			for {
				ready, unacked, _ := mt.Pending(ctx)
				if ready+unacked == 0 {
					break
				}
				time.Sleep(50 * time.Microsecond) // polling a condition
			}
			b.StopTimer()
			if err := e.Stop(ctx); err != nil {
				b.Fatal(err)
			}
			if got := e.Stats().Applied; got != int64(b.N) {
				b.Fatalf("applied %d, want %d", got, b.N)
			}
		})
	}
}

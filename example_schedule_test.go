package idem_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// ReportDue asks for the nightly report.
type ReportDue struct{}

// A schedule publishes a message at every tick of a cron expression (or
// every interval with Engine.Every). Every replica registers it; each tick
// is published once across them, under an ID derived from the schedule's
// name and the tick. The clock is fixed here so that the example runs at
// once; RunSchedules is what the engine's poller calls.
func ExampleEngine_Cron() {
	ctx := context.Background()
	var now atomic.Int64 // the engine's clock, in Unix nanoseconds
	now.Store(time.Date(2026, 3, 1, 1, 0, 0, 0, time.UTC).UnixNano())
	e, err := idem.NewEngine(memstore.New(nil), memtransport.New(nil), &idem.Config{
		Clock:  func() time.Time { return time.Unix(0, now.Load()).UTC() },
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	done := make(chan string, 1)
	_ = e.Handle("idem_test.ReportDue", func(_ context.Context, env idem.Envelope) error {
		done <- env.Headers[idem.HeaderScheduleTick]
		return nil
	})
	// 02:30 every day; a missed night is caught up with one report
	// (idem.SkipMissed(grace) would skip it instead).
	if err := e.Cron("nightly-report", "30 2 * * *", ReportDue{}); err != nil {
		panic(err)
	}
	if err := e.Start(ctx); err != nil {
		panic(err)
	}
	defer e.Stop(ctx)

	now.Add(int64(90 * time.Minute)) // 02:30
	n, err := e.RunSchedules(ctx)
	fmt.Println(n, err, <-done)
	// Output: 1 <nil> 2026-03-01T02:30:00Z
}

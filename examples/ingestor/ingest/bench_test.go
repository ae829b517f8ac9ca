package ingest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/ingestor/ingest"
	"github.com/idemhq/idem/store/sqlitestore"
)

// BenchmarkImport imports a 100,000-line file on the embedded default
// (SQLite store and queue, one engine) at three chunk sizes, from upload
// to the job's last transition, and reports lines per second.
//
//	go test -run '^$' -bench BenchmarkImport -benchtime 1x ./examples/ingestor/ingest
func BenchmarkImport(b *testing.B) {
	const lines = 100_000
	file := makeCSV(lines, "bench", nil)
	for _, size := range []int{100, 500, 2000} {
		b.Run(fmt.Sprintf("chunk=%d", size), func(b *testing.B) {
			ctx := context.Background()
			q, err := sqlitestore.Open(ctx, b.TempDir()+"/bench.db", &sqlitestore.Config{Logger: quiet()})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			app, err := ingest.New(q, &ingest.Config{ChunkSize: size, MaxFileBytes: 32 << 20, ConfirmWait: time.Minute,
				Engine: &idem.Config{}, Logger: quiet()})
			if err != nil {
				b.Fatal(err)
			}
			if err := app.Start(ctx); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = app.Stop(ctx) }()
			b.SetBytes(int64(len(file)))
			b.ResetTimer()
			began := time.Now()
			for i := range b.N {
				// Another supplier code makes the same bytes a new job.
				sub, err := app.Submit(ctx, fmt.Sprintf("BENCH-%d", i), ingest.FormatCSV, "bench.csv", file)
				if err != nil || !sub.Created {
					b.Fatalf("submit: %+v %v", sub, err)
				}
				deadline := time.Now().Add(5 * time.Minute)
				for {
					v, err := app.Job(ctx, sub.JobID)
					if err != nil {
						b.Fatal(err)
					}
					if ingest.IsTerminal(v.Status) {
						if v.Status != string(ingest.Succeeded) || v.Lines.Imported != lines {
							b.Fatalf("job %s: %+v", v.Status, v.Lines)
						}
						break
					}
					if time.Now().After(deadline) {
						b.Fatalf("job %s stuck in %s: %+v", sub.JobID, v.Status, v.Chunks)
					}
					time.Sleep(5 * time.Millisecond) // polling the job's state with a deadline
				}
			}
			b.ReportMetric(float64(b.N*lines)/time.Since(began).Seconds(), "lines/s")
		})
	}
}

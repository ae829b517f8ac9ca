package ingest_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemhq/idem/examples/ingestor/ingest"
)

// The same file uploaded twice is one job: 201, then 200.
func ExampleApp_Handler() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ingestor")
	defer os.RemoveAll(dir)
	log := slog.New(slog.DiscardHandler)
	q, err := ingest.OpenStore(ctx, filepath.Join(dir, "ingestor.db"), log)
	if err != nil {
		panic(err)
	}
	defer q.Close()
	app, err := ingest.New(q, &ingest.Config{ChunkSize: 2, Logger: log})
	if err != nil {
		panic(err)
	}
	if err := app.Start(ctx); err != nil {
		panic(err)
	}
	defer app.Stop(ctx)
	srv := httptest.NewServer(app.Handler())
	defer srv.Close()

	file := "advice_id,line_no,sku,quantity,expected_date,depot\n" +
		"ADV-1,1,SKU-1,5,2026-03-02,FH01\nADV-1,2,SKU-2,7,2026-03-02,FH02\n"
	for range 2 {
		res, err := http.Post(srv.URL+"/imports?supplier=ACME", "text/csv", strings.NewReader(file))
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		fmt.Println(res.Status)
	}
	// Output:
	// 201 Created
	// 200 OK
}

package idem_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store/sqlitestore"
)

// A parser whose API takes at most 5 calls at once and 20 a second, shared
// by every tenant: the engine admits each call to the plain handler that
// makes it under both limits, across every replica of the store, and
// releases its slot when the call's outcome commits.
func ExampleLimit() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-flow")
	defer os.RemoveAll(dir)
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "idem.db"), &sqlitestore.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()

	e, err := idem.NewEngine(st, st, &idem.Config{
		Logger: slog.New(slog.DiscardHandler),
		Limits: []idem.Limit{{
			Name:         "parser-api",
			MessageTypes: []string{"searchimport.StartParsingReferenceFile"},
			Concurrency:  5,
			Rate:         20, Burst: 20,
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var mu sync.Mutex
	inFlight, most, parsed := 0, 0, 0
	done := make(chan struct{})
	_ = e.Handle("searchimport.StartParsingReferenceFile", func(ctx context.Context, env idem.Envelope) error {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		// ... call the parser ...
		mu.Lock()
		defer mu.Unlock()
		inFlight--
		if parsed++; parsed == 12 {
			close(done)
		}
		return nil
	})
	if err := e.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer e.Stop(ctx)
	for i := range 12 {
		tenant := []string{"acme", "globex"}[i%2]
		_ = e.Publish(ctx, idem.Envelope{ID: fmt.Sprintf("parse-%d", i), Type: "searchimport.StartParsingReferenceFile",
			CorrelationID: fmt.Sprintf("%s/file-%d", tenant, i), Headers: map[string]string{"tenant": tenant}})
	}
	<-done
	fmt.Println("parsed 12 files; more than 5 at once:", most > 5)
	// Output: parsed 12 files; more than 5 at once: false
}

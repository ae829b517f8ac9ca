package idem_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/countersaga"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport/memtransport"
)

// Start refuses limits it cannot enforce, or that name what the engine
// does not consume, with an error saying what to change.
func TestStartRefusesLimitsItCannotEnforce(t *testing.T) {
	ctx := context.Background()
	counter := countersaga.Machine()
	sq, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	for _, tc := range []struct {
		name   string
		limits []idem.Limit
		broker bool
		want   string
	}{
		{"a broker as transport", []idem.Limit{{Name: "api", Concurrency: 1}}, true, "needs the store's own queue"},
		{"no name", []idem.Limit{{Concurrency: 1}}, false, "limit name is empty"},
		{"a name with NUL", []idem.Limit{{Name: "a\x00b", Concurrency: 1}}, false, "U+0000"},
		{"a negative cap", []idem.Limit{{Name: "api", Concurrency: -1}}, false, "Concurrency is -1"},
		{"two of one name", []idem.Limit{{Name: "api", Concurrency: 1}, {Name: "api", Rate: 1}}, false, `limit "api" is declared twice`},
		{"an unknown saga type", []idem.Limit{{Name: "api", SagaType: "<script>", Concurrency: 1}}, false, `SagaType "<script>" is not a registered saga type`},
		{"an unknown message type", []idem.Limit{{Name: "api", MessageTypes: []string{"nope"}, Concurrency: 1}}, false, `message type "nope" is consumed by no registered saga or handler`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e *idem.Engine
			var err error
			cfg := &idem.Config{Limits: tc.limits}
			if tc.broker {
				e, err = idem.NewEngine(memstore.New(nil), memtransport.New(nil), cfg)
			} else {
				e, err = idem.NewEngine(sq, sq, cfg)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Register(counter); err != nil {
				t.Fatal(err)
			}
			err = e.Start(ctx)
			if err == nil {
				_ = e.Stop(ctx)
				t.Fatalf("Start with %+v: no error, want one containing %q", tc.limits, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Config.Limits") {
				t.Fatalf("Start with %+v: %v, want an error naming Config.Limits and containing %q", tc.limits, err, tc.want)
			}
		})
	}
}

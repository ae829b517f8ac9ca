package idem_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/countersaga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
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
		{"a transport that cannot extend leases", []idem.Limit{{Name: "api", Concurrency: 1}}, true, "needs leases the engine can extend"},
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
				e, err = idem.NewEngine(memstore.New(nil), noLeases{memtransport.New(nil)}, cfg)
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

// Start records the declared limits' values in the store, so that an
// operator's tool in another process (idem limits ls) can show them; an
// override already in the store is left as it is.
func TestStartDeclaresLimitsInTheStore(t *testing.T) {
	ctx := context.Background()
	sq, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	if err := sq.SetLimit(ctx, store.Limit{Name: "parser-api", Concurrency: 9}); err != nil {
		t.Fatal(err)
	}
	cfg := &idem.Config{Limits: []idem.Limit{
		{Name: "parser-api", Concurrency: 5, Rate: 20, Burst: 10, Key: func(*idem.Envelope) string { return "t" }},
		{Name: "counter", SagaType: countersaga.SagaType, Rate: 2.5},
	}}
	e, err := idem.NewEngine(sq, sq, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(countersaga.Machine()); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Stop(ctx) }()
	got, err := sq.DeclaredLimits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Limit{{Name: "counter", Rate: 2.5}, {Name: "parser-api", Concurrency: 5, Rate: 20, Burst: 10}}
	if len(got) != len(want) {
		t.Fatalf("declared limits after Start: got %+v, want %+v", got, want)
	}
	for i := range got {
		got[i].UpdatedAt = time.Time{}
		if got[i] != want[i] {
			t.Errorf("declared limit %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	over, err := sq.Limits(ctx)
	if err != nil || len(over) != 1 || over[0].Concurrency != 9 {
		t.Errorf("overrides after Start: got %+v, %v, want parser-api's override of 9 kept", over, err)
	}
}

// TestEmittedMessagesInheritFairness: a saga's emissions carry the
// fairness headers of the message that caused them, so a tenant's
// follow-ups stay in its share; one without them gets none.
func TestEmittedMessagesInheritFairness(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	env := b.env("m-1", Inc{Key: "k", N: 1})
	env.Headers = map[string]string{transport.HeaderFairnessKey: "tenant-<script>", transport.HeaderFairnessWeight: "3", transport.HeaderPriority: "-2"}
	b.publish(env)
	b.send("m-2", Inc{Key: "j", N: 1})
	b.settle()
	sent := b.rec.sent(incrementedType)
	if len(sent) != 2 {
		t.Fatalf("got %d emitted events, want 2", len(sent))
	}
	for _, e := range sent {
		want := transport.Fairness{Weight: 1}
		if e.CausationID == "m-1" {
			want = transport.Fairness{Key: "tenant-<script>", Weight: 3, Priority: -2}
		}
		if got := transport.FairnessOf(&e); got != want {
			t.Errorf("event caused by %s: fairness %+v, want %+v (headers %v)", e.CausationID, got, want, e.Headers)
		}
	}
}

// TestStartRefusesFairShareBesideABroker: a broker keeps its own order,
// so FairShare stops Start with a message saying what to change.
func TestStartRefusesFairShareBesideABroker(t *testing.T) {
	ctx := context.Background()
	e, err := idem.NewEngine(memstore.New(nil), memtransport.New(nil), &idem.Config{FairShare: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(countersaga.Machine()); err != nil {
		t.Fatal(err)
	}
	err = e.Start(ctx)
	if err == nil {
		_ = e.Stop(ctx)
		t.Fatal("Start with FairShare beside a broker: no error")
	}
	if !strings.Contains(err.Error(), "Config.FairShare needs the store's own queue") {
		t.Fatalf("Start with FairShare beside a broker: got %q, want it to name Config.FairShare", err)
	}
}

// noLeases is a transport whose leases the engine cannot extend (it
// hides memtransport's transport.LeaseExtender).
type noLeases struct{ transport.Transport }

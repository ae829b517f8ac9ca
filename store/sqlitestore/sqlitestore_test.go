package sqlitestore_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/store/storetest"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/transporttest"
)

// quiet is the logger of the tests' stores.
var quiet = slog.New(slog.DiscardHandler)

// openStore returns a store on a new file in the test's temporary
// directory, closed when the test ends.
func openStore(t testing.TB, cfg sqlitestore.Config) *sqlitestore.Store {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), &cfg)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestStoreConformance(t *testing.T) {
	const lease = time.Second
	f := storetest.Features{Queue: true, Lease: lease, Pending: true, Tokens: true, Admit: true,
		TamperJournal: tamperJournal, DomainTx: domainTxFeature, Schema: schemaFeature, SharedClock: twoProcesses}
	storetest.Run(t, f, func(t *testing.T) store.Store {
		return openStore(t, sqlitestore.Config{Lease: lease, PollInterval: 50 * time.Millisecond})
	})
}

// twoProcesses opens two stores on one new file, as two processes on one
// host would: they measure timer and outbox claims on the host's clock,
// not on the engines' clocks.
func twoProcesses(t *testing.T) (store.Store, store.Store) {
	a := openStore(t, sqlitestore.Config{})
	b, err := sqlitestore.Open(context.Background(), a.Path(), &sqlitestore.Config{Logger: quiet})
	if err != nil {
		t.Fatalf("open a second store on %s: %v", a.Path(), err)
	}
	return a, b
}

// tamperJournal tries to change and delete the journal of k through
// another connection to the store's file, as another program would.
func tamperJournal(t *testing.T, s store.Store, k store.Key) []error {
	db := rawDB(t, s.(*sqlitestore.Store).Path())
	var errs []error
	for _, stmt := range []string{
		`UPDATE idem_journal SET to_state = 'Tampered' WHERE saga_type = ?1 AND key = ?2`,
		`DELETE FROM idem_journal WHERE saga_type = ?1 AND key = ?2`,
		`DELETE FROM idem_journal`,
	} {
		_, err := db.Exec(stmt, k.SagaType, k.Key)
		if err != nil && !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: got error %v, want the append-only refusal", stmt, err)
		}
		errs = append(errs, err)
	}
	return errs
}

func TestQueueConformance(t *testing.T) {
	const lease = 200 * time.Millisecond
	transporttest.Run(t, transporttest.Features{Lease: lease, Fencing: true, NativeDelay: true, Pending: true}, func(t *testing.T) transport.Transport {
		return openStore(t, sqlitestore.Config{Lease: lease, PollInterval: 50 * time.Millisecond})
	})
}

// A queue row whose envelope cannot be decoded is still handed out, with its
// ID and body, so that the engine dead-letters it (no type) instead of every
// Receive failing on it.
func TestUndecodableQueueRowIsDelivered(t *testing.T) {
	t.Parallel()
	s := openStore(t, sqlitestore.Config{})
	ctx := context.Background()
	if err := s.Publish(ctx, []transport.Envelope{{ID: "bad-1", Type: "t", Body: []byte("body")}, {ID: "good-1", Type: "t"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rawDB(t, s.Path()).Exec(`UPDATE idem_queue SET envelope = '{not json' WHERE id = 'bad-1'`); err != nil {
		t.Fatal(err)
	}
	ds, err := s.Receive(ctx, 10)
	if err != nil {
		t.Fatalf("Receive with an undecodable row: %v", err)
	}
	if len(ds) != 2 || ds[0].Envelope.ID != "bad-1" || ds[0].Envelope.Type != "" || string(ds[0].Envelope.Body) != "body" || ds[1].Envelope.Type != "t" {
		t.Fatalf("deliveries: %+v; want bad-1 without a type and good-1", ds)
	}
	if err := s.Ack(ctx, ds); err != nil {
		t.Fatal(err)
	}
}

// A fair receive delivers an undecodable row too, for the engine to
// dead-letter, once its indexes exist (they index the row's headers).
func TestUndecodableQueueRowIsDeliveredFairly(t *testing.T) {
	t.Parallel()
	s := openStore(t, sqlitestore.Config{})
	ctx := context.Background()
	warm, cancel := context.WithTimeout(ctx, 50*time.Millisecond) // builds the fair indexes
	_, _ = s.ReceiveAdmitted(warm, &store.ReceiveParams{Max: 1, Fair: true})
	cancel()
	if err := s.Publish(ctx, []transport.Envelope{{ID: "bad-1", Type: "t", Body: []byte("body")}, {ID: "good-1", Type: "t"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rawDB(t, s.Path()).Exec(`UPDATE idem_queue SET envelope = '{not json' WHERE id = 'bad-1'`); err != nil {
		t.Fatal(err)
	}
	ds, err := s.ReceiveAdmitted(ctx, &store.ReceiveParams{Max: 10, Fair: true})
	if err != nil {
		t.Fatalf("fair receive with an undecodable row: %v", err)
	}
	if len(ds) != 2 || ds[0].Envelope.ID != "bad-1" || ds[0].Envelope.Type != "" || ds[1].Envelope.Type != "t" {
		t.Fatalf("deliveries: %+v; want bad-1 without a type and good-1", ds)
	}
}

// Close stops the writer and every connection: nothing is left running,
// also after a Receive was blocked in it.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Publish(ctx, []transport.Envelope{{ID: "m-1", Type: "t"}}); err != nil {
		t.Fatal(err)
	}
	ds, err := s.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(ctx, ds); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := s.Receive(ctx, 1)
		blocked <- err
	}()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Receive blocked during Close: got %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/storetest"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/transporttest"
)

// openStore returns a store on a fresh schema of its own, dropped when the
// test ends.
func openStore(t testing.TB, cfg pgstore.Config) *pgstore.Store {
	t.Helper()
	url := testenv.PostgresURL(t)
	cfg.Schema = "t_" + randHex()
	cfg.Migrate = true
	ctx := context.Background()
	s, err := pgstore.Open(ctx, url, &cfg)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop schema %s: %v", cfg.Schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{cfg.Schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", cfg.Schema, err)
		}
	})
	return s
}

// conformanceLease is the queue lease of the stores the conformance suite
// opens.
const conformanceLease = time.Second

// conformance is what pgstore declares to storetest.Run.
func conformance() storetest.Features {
	return storetest.Features{Queue: true, Lease: conformanceLease, Partitioned: true, Pending: true, Claim: true, Tokens: true, Admit: true,
		TamperJournal: tamperJournal, DomainTx: domainTxFeature, Schema: schemaFeature, SharedClock: twoReplicas}
}

func TestStoreConformance(t *testing.T) {
	testenv.PostgresURL(t)
	storetest.Run(t, conformance(), func(t *testing.T) store.Store {
		return openStore(t, pgstore.Config{Lease: conformanceLease, PollInterval: 100 * time.Millisecond})
	})
}

// twoReplicas opens two stores on one new schema, as two replicas would:
// they measure timer and outbox claims on the database's clock, so one
// whose clock runs ahead does not take back the other's claims.
func twoReplicas(t *testing.T) (store.Store, store.Store) {
	a := openStore(t, pgstore.Config{})
	b, err := pgstore.Open(context.Background(), testenv.PostgresURL(t), &pgstore.Config{Schema: a.Schema()})
	if err != nil {
		t.Fatalf("open a second store on schema %s: %v", a.Schema(), err)
	}
	return a, b
}

// tamperJournal tries to change and delete the journal of k through
// another connection, as another program with the store's role would.
func tamperJournal(t *testing.T, s store.Store, k store.Key) []error {
	conn := schemaConn(t, s.(*pgstore.Store).Schema())
	var errs []error
	for _, stmt := range []string{
		`UPDATE idem_journal SET to_state = 'Tampered' WHERE saga_type = $1 AND key = $2`,
		`DELETE FROM idem_journal WHERE saga_type = $1 AND key = $2`,
		`TRUNCATE idem_journal`,
	} {
		var err error
		if strings.HasPrefix(stmt, "TRUNCATE") {
			_, err = conn.Exec(t.Context(), stmt)
		} else {
			_, err = conn.Exec(t.Context(), stmt, k.SagaType, k.Key)
		}
		if err != nil && !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: got error %v, want the append-only refusal", stmt, err)
		}
		errs = append(errs, err)
	}
	return errs
}

func TestQueueConformance(t *testing.T) {
	testenv.PostgresURL(t)
	const lease = 300 * time.Millisecond
	transporttest.Run(t, transporttest.Features{Lease: lease, Fencing: true, NativeDelay: true, Partitioned: true, Pending: true, Shared: true}, func(t *testing.T) transport.Transport {
		return openStore(t, pgstore.Config{Lease: lease, PollInterval: 100 * time.Millisecond})
	})
}

func randHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func TestReceivePartitionSplitsKeys(t *testing.T) {
	testenv.PostgresURL(t)
	t.Parallel()
	s := openStore(t, pgstore.Config{})
	ctx := context.Background()
	var envs []transport.Envelope
	for i := range 60 {
		envs = append(envs, transport.Envelope{ID: fmt.Sprintf("m-%d", i), Type: "t", CorrelationID: fmt.Sprintf("k-%d", i%12), Body: []byte(`{}`)})
	}
	if err := s.Publish(ctx, envs); err != nil {
		t.Fatal(err)
	}
	const parts = 3
	partOf := map[string]int{} // correlation ID → partition
	seen := map[string]bool{}
	for part := range parts {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ds, err := s.ReceivePartition(rctx, 100, part, parts)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		for _, d := range ds {
			if p, ok := partOf[d.Envelope.CorrelationID]; ok && p != part {
				t.Errorf("key %s handed to partitions %d and %d", d.Envelope.CorrelationID, p, part)
			}
			partOf[d.Envelope.CorrelationID] = part
			if seen[d.Envelope.ID] {
				t.Errorf("message %s handed out twice", d.Envelope.ID)
			}
			seen[d.Envelope.ID] = true
		}
	}
	if len(seen) != len(envs) {
		t.Errorf("partitions handed out %d messages, want all %d", len(seen), len(envs))
	}
}

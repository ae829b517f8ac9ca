package idem

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// sizedStore is a memstore that reports a pool size.
type sizedStore struct {
	*memstore.Store
	size int
}

func (s sizedStore) PoolSize() int { return s.size }

func TestCheckPool(t *testing.T) {
	cfg := Config{Lanes: 8, Consumers: 2} // needs 8 + 3 = 11: lanes are shared by the consumers
	for _, tc := range []struct {
		name  string
		st    store.Store
		queue bool
		want  []string // parts of the error; none: no error
	}{
		{name: "store without a pool", st: memstore.New(nil)},
		{name: "pool of unknown size", st: sizedStore{memstore.New(nil), 0}},
		{name: "pool that fits exactly", st: sizedStore{memstore.New(nil), 11}},
		{name: "larger pool", st: sizedStore{memstore.New(nil), 64}, queue: true},
		{name: "one short, store is the queue", st: sizedStore{memstore.New(nil), 10}, queue: true,
			want: []string{"holds 10 connections", "needs 11", "Lanes 8", "queue listener", "at least 11", "MaxConns", "Config.Lanes"}},
		{name: "one short, with a relay", st: sizedStore{memstore.New(nil), 10},
			want: []string{"needs 11", "outbox relay"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkPool(resolveCapabilities(tc.st, nil).poolSize, cfg, tc.queue)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got nil, want an error saying %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// Start refuses a pool too small for the engine, before starting anything,
// and starts on one that fits.
func TestStartRefusesSmallPool(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		size   int
		starts bool
	}{{size: 6, starts: false}, {size: 7, starts: true}} { // Lanes 4 + 3 = 7, whatever Consumers
		st := sizedStore{memstore.New(nil), tc.size}
		e, err := NewEngine(st, memtransport.New(nil), &Config{Lanes: 4, Consumers: 3})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Handle("test.Ping", func(context.Context, Envelope) error { return nil }); err != nil {
			t.Fatal(err)
		}
		err = e.Start(ctx)
		if tc.starts {
			if err != nil {
				t.Errorf("pool of %d: Start: got %v, want nil", tc.size, err)
			}
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := e.Stop(sctx); err != nil {
				t.Errorf("stop: %v", err)
			}
			cancel()
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "needs 7") {
			t.Errorf("pool of %d: Start: got %v, want the pool refused (needs 7)", tc.size, err)
		}
		if err := e.Start(ctx); err == nil || !strings.Contains(err.Error(), "needs 7") {
			t.Errorf("pool of %d: second Start: got %v, want the same refusal (nothing started)", tc.size, err)
		}
	}
}

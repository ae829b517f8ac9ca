package idem

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// lockProbe is a Machine whose Decode and Correlate record whether the
// engine's lock was held while they ran.
type lockProbe struct {
	*saga.Machine[benchState]
	e    *Engine
	held atomic.Int32
}

func (p *lockProbe) probe() {
	if p.e.mu.TryLock() {
		p.e.mu.Unlock()
		return
	}
	p.held.Add(1)
}

func (p *lockProbe) Decode(t string, b []byte) (any, string, error) {
	p.probe()
	return p.Machine.Decode(t, b)
}

func (p *lockProbe) Correlate(msg any) (string, bool) {
	p.probe()
	return p.Machine.Correlate(msg)
}

// TestUserCodeRunsWithoutTheEngineLock: Publish, NewEnvelope and
// PublishAndWait run the machine's Decode and Correlate without holding
// the engine's lock, so that concurrent publishers, Ready and Stop do not
// wait behind a user's decoding, and a Machine may call back into the
// engine.
func TestUserCodeRunsWithoutTheEngineLock(t *testing.T) {
	ctx := context.Background()
	mt := memtransport.New(nil)
	defer mt.Close()
	e, err := NewEngine(memstore.New(nil), mt, &Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	p := &lockProbe{Machine: benchMachine(), e: e}
	if err := e.Register(p); err != nil {
		t.Fatal(err)
	}
	env, err := e.NewEnvelope("a", benchInc{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	env.CorrelationID = "" // Publish computes it again, decoding the body
	if err := e.Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel() // PublishAndWait decodes, then gives up at once
	_, _ = e.PublishAndWait(cctx, env)
	if n := p.held.Load(); n != 0 {
		t.Fatalf("the machine's Decode or Correlate ran %d times with the engine's lock held", n)
	}
}

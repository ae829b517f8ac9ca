package idem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// beats is a store.ReplicaRegistry whose Heartbeat fails with err.
type beats struct {
	store.ReplicaRegistry
	err error
}

func (b *beats) Heartbeat(context.Context, *store.Replica) error { return b.err }

// Beside a broker, an engine with nothing to commit would keep Ready
// failing after a failover ended: its receives write nothing to the
// store. A heartbeat is a write: one that lands clears the refusal, and
// one refused with store.ErrReadOnly keeps it.
func TestHeartbeatClearsReadOnlyRefusal(t *testing.T) {
	h := &health{queue: false}
	rr := &beats{err: fmt.Errorf("heartbeat: %w: cannot execute INSERT in a read-only transaction", store.ErrReadOnly)}
	hb := &heartbeat{base: &base{cfg: Config{Clock: time.Now}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), health: h}, rr: rr, id: "r1"}
	h.ended(nil, fmt.Errorf("commit: %w", store.ErrReadOnly))
	h.receive(nil) // a broker's receive says nothing of the store
	hb.beat(context.Background(), &store.Replica{ID: "r1"}, false)
	if err := h.err(); !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("after a refused heartbeat: %v, want the refusal", err)
	}
	rr.err = nil
	hb.beat(context.Background(), &store.Replica{ID: "r1"}, false)
	if err := h.err(); err != nil {
		t.Fatalf("after a heartbeat that landed: %v, want nil", err)
	}
}

package idem

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
)

// health is the part Ready asks about the store: whether it refuses
// writes (store.ErrReadOnly: after a failover, the server it reached is no
// longer the primary). It observes how units of work end, the consumers'
// receives and the heartbeats. A refusal stands from the first
// ErrReadOnly until a unit of work commits, a heartbeat lands (every
// Config.HeartbeatInterval, on a store that keeps them), or, on the
// store's own queue (where a receive writes its leases), a receive
// succeeds. It is safe for concurrent use.
type health struct {
	quiet
	queue bool // a successful receive is a successful write

	mu      sync.Mutex
	refused error     // the first ErrReadOnly since the last success
	since   time.Time // when it was seen
}

func (h *health) ended(_ *attempt, err error) { h.note(err, true) }

func (h *health) committed(*attempt, time.Duration, int) { h.note(nil, true) }

// beat is told how each heartbeat's write ended: one that landed shows
// the store takes writes again.
// A nil health (a test's bare engine parts) ignores it.
func (h *health) beat(err error) {
	if h != nil {
		h.note(err, true)
	}
}

// receive is told how each consumer's receive ended.
// A nil health (a test's bare engine parts) ignores it.
func (h *health) receive(err error) {
	if h != nil {
		h.note(err, h.queue)
	}
}

// note records err; a nil err clears a refusal when clears is set.
func (h *health) note(err error, clears bool) {
	switch {
	case err == nil && !clears:
		return
	case err != nil && !errors.Is(err, store.ErrReadOnly):
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		h.refused = nil
	case h.refused == nil:
		h.refused, h.since = err, time.Now()
	}
}

// err returns an error wrapping store.ErrReadOnly while the store refuses
// writes, nil otherwise.
func (h *health) err() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refused == nil {
		return nil
	}
	return fmt.Errorf("idem: the store refuses writes since %s (the database server is no longer the primary; the store connects again to find it): %w",
		h.since.UTC().Format(time.RFC3339), h.refused)
}

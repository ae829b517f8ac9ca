package idem

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/store"
)

// msgScope is one message's domain statements (store.MessageTx) as the
// lane applies it: kept once the transition is applied, undone otherwise.
// A nil *msgScope (the store lets handlers run no statements) does nothing.
type msgScope struct {
	mt   store.MessageTx
	done bool
}

// keep keeps the statements; an error means they were undone and the
// message must fail.
func (m *msgScope) keep(ctx context.Context) error {
	if m == nil || m.done {
		return nil
	}
	m.done = true
	if err := m.mt.End(ctx, true); err != nil {
		return fmt.Errorf("domain statements: %w", err)
	}
	return nil
}

// undo undoes the statements unless they were kept. A failure to undo
// leaves the transaction unusable, and the unit of work's commit fails.
func (m *msgScope) undo(ctx context.Context) {
	if m == nil || m.done {
		return
	}
	m.done = true
	_ = m.mt.End(ctx, false)
}

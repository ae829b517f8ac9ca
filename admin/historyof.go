package admin

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/internal/history"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// HistoryOf returns k's journal j as GET /api/sagas/{type}/{key}/history
// shows it (a JSON payload as JSON, not as the store's base64), for a
// reader with a store and no Server, such as idem sagas show --json. An
// emitted message's sent state comes from st's outbox when st can tell
// (readmodel.OutboxSentReader): "unknown" for one that is not there, as on
// the store's own queue, which only a Server knows the engine uses. It
// sets the Diff of j's entries from their states (history.FillDiffs). The
// error is the outbox's.
func HistoryOf(ctx context.Context, st store.Store, k store.Key, j []store.JournalEntry) (*SagaHistory, error) {
	sent := map[string]sentState{}
	if ids := emittedIDs(j); len(ids) > 0 {
		r, _ := st.(readmodel.OutboxSentReader)
		if err := outboxSent(ctx, r, ids, sent); err != nil {
			return nil, fmt.Errorf("admin: history of saga %s/%s: read the outbox's sent state: %w", k.SagaType, k.Key, err)
		}
	}
	history.FillDiffs(j, historyDiffLimit)
	return &SagaHistory{SagaType: k.SagaType, Key: k.Key, Entries: entriesOf(j, sent)}, nil
}

// entriesOf are the journal's entries with the sent states of what they
// emitted.
func entriesOf(j []store.JournalEntry, sent map[string]sentState) []HistoryEntry {
	out := make([]HistoryEntry, 0, len(j))
	for i := range j {
		out = append(out, historyEntry(&j[i], sent))
	}
	return out
}

// emittedIDs are the IDs of the messages the journal's entries emitted.
func emittedIDs(j []store.JournalEntry) []string {
	var ids []string
	for i := range j {
		for _, m := range j[i].Emitted {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

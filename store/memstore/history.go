package memstore

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var _ readmodel.OutboxSentReader = (*Store)(nil)

// cloneJournalEntry copies j deeply, so that neither the committer nor a
// reader shares its payload, headers, emitted list or diff with the store.
func cloneJournalEntry(j store.JournalEntry) store.JournalEntry {
	j.Payload = slices.Clone(j.Payload)
	j.Diff = slices.Clone(j.Diff)
	j.State = slices.Clone(j.State)
	j.Headers = maps.Clone(j.Headers)
	j.Emitted = slices.Clone(j.Emitted)
	return j
}

func cloneJournal(js []store.JournalEntry) []store.JournalEntry {
	if js == nil {
		return nil
	}
	out := make([]store.JournalEntry, len(js))
	for i, j := range js {
		out[i] = cloneJournalEntry(j)
	}
	return out
}

// OutboxSent reports the sent time of each of ids still in the outbox
// (zero while unsent); see readmodel.OutboxSentReader.
func (s *Store) OutboxSent(ctx context.Context, ids []string) (map[string]time.Time, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "outbox sent"); err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(ids))
	for _, id := range ids {
		switch {
		case s.unsent[id] != nil:
			out[id] = time.Time{}
		case s.sent[id] != nil:
			out[id] = s.sent[id].msg.SentAt
		}
	}
	return out, nil
}

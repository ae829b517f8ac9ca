package memstore

import (
	"context"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var _ readmodel.JournalTailer = (*Store)(nil)

// JournalTail returns the latest n entries of k's journal, oldest first,
// and the journal's length; see readmodel.JournalTailer. It copies only the
// entries it returns.
func (s *Store) JournalTail(ctx context.Context, k store.Key, n int) ([]store.JournalEntry, int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "journal tail of saga "+k.SagaType+"/"+k.Key); err != nil {
		return nil, 0, err
	}
	j := s.journal[k]
	if n <= 0 {
		return nil, len(j), nil
	}
	return cloneJournal(j[max(0, len(j)-n):]), len(j), nil
}

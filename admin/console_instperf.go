package admin

import (
	"context"

	"github.com/idemhq/idem/store"
)

// latestJournal reads the latest journalShown entries of k's journal and
// how many earlier ones it holds: from the store's JournalTailer, which
// reads those entries only, or else from the whole journal.
func (s *Server) latestJournal(ctx context.Context, k store.Key) (shown []store.JournalEntry, older int, err error) {
	if jt, ok := s.st.(store.JournalTailer); ok {
		shown, total, err := jt.JournalTail(ctx, k, journalShown)
		return shown, max(0, total-len(shown)), err
	}
	all, err := s.st.Journal(ctx, k)
	if len(all) > journalShown {
		return all[len(all)-journalShown:], len(all) - journalShown, err
	}
	return all, 0, err
}

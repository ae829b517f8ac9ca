package admin

import (
	"context"

	"github.com/idemhq/idem/internal/history"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
)

// latestJournal reads the latest journalShown entries of k's journal, with
// their diffs, and how many earlier ones it holds: from the store's
// JournalTailer, which reads those entries only, or else from the whole
// journal. It reads one entry more than it shows, whose state is the state
// before the oldest entry shown.
func (c *console) latestJournal(ctx context.Context, k store.Key) (shown []store.JournalEntry, older int, err error) {
	var total int
	if jt := c.caps.journalTailer; jt != nil {
		shown, total, err = jt.JournalTail(ctx, k, journalShown+1)
	} else {
		shown, err = c.st.Journal(ctx, k)
		total = len(shown)
		shown = shown[max(0, len(shown)-journalShown-1):]
	}
	if err != nil {
		return nil, 0, err
	}
	history.FillDiffs(shown, inspect.HistoryDiffLimit)
	shown = shown[max(0, len(shown)-journalShown):]
	return shown, total - len(shown), nil
}

package memstore

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/store/readmodel"
)

var (
	_ readmodel.RowEstimator = (*Store)(nil)
	_ readmodel.RowCounter   = (*Store)(nil)
)

// rows counts every kind of row; the caller holds s.mu. Its cost grows
// with the number of sagas (a map per saga), not with their rows.
func (s *Store) rows() map[string]int64 {
	out := map[string]int64{
		readmodel.TableInstances:   int64(len(s.instances)),
		readmodel.TableOutbox:      int64(len(s.unsent) + len(s.sent)),
		readmodel.TableDeadLetters: int64(len(s.dead)),
		readmodel.TableSchedules:   int64(len(s.schedules)),
		readmodel.TableTokens:      int64(len(s.tokens)),
	}
	var inbox, timers, journal int64
	for _, m := range s.inbox {
		inbox += int64(len(m))
	}
	for _, m := range s.timers {
		timers += int64(len(m))
	}
	for _, j := range s.journal {
		journal += int64(len(j))
	}
	out[readmodel.TableInbox], out[readmodel.TableTimers], out[readmodel.TableJournal] = inbox, timers, journal
	return out
}

// EstimateRows counts the rows of each kind exactly; see
// readmodel.RowEstimator.
func (s *Store) EstimateRows(ctx context.Context) (map[string]int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "estimate rows"); err != nil {
		return nil, err
	}
	return s.rows(), nil
}

// CountRows counts the rows of table up to limit; see readmodel.RowCounter.
func (s *Store) CountRows(ctx context.Context, table string, limit int64) (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "count rows"); err != nil {
		return 0, err
	}
	n, ok := s.rows()[table]
	if !ok {
		return 0, fmt.Errorf("memstore: count rows of %q: no such table (want one of the store.Table names)", table)
	}
	return min(n, max(limit, 0)), nil
}

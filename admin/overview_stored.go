package admin

import (
	"context"
	"math"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// StoredCounts are what the store holds, whichever process stored it:
// unlike Rates and Totals, which count what this process did since it
// started. A count is nil when the store cannot count that kind of row
// (it implements neither readmodel.RowCounter nor readmodel.RowEstimator).
type StoredCounts struct {
	DeadLetters *StoredCount `json:"dead_letters,omitempty"`
	Timers      *StoredCount `json:"timers,omitempty"`
}

// StoredCount is how many rows of one kind the store holds.
type StoredCount struct {
	Count int64 `json:"count"`
	// Accuracy is AccuracyExact, AccuracyEstimate or AccuracyAtLeast.
	Accuracy string `json:"accuracy"`
	// Source says where an estimate comes from, for the overview's note.
	Source string `json:"-"`
}

// The accuracies of a StoredCount.
const (
	// AccuracyExact: Count is exact (there are fewer than StoredCountBound).
	AccuracyExact = "exact"
	// AccuracyEstimate: there are StoredCountBound rows or more, and Count
	// is the store's estimate (readmodel.RowEstimator); for the unresolved dead
	// letters, scaled by their share of a sample (unresolvedCount).
	AccuracyEstimate = "estimate"
	// AccuracyAtLeast: there are Count rows or more, and the store cannot
	// estimate how many.
	AccuracyAtLeast = "at_least"
)

// StoredCountBound is how many rows the overview counts exactly; above it,
// it shows the store's estimate, so that a refresh reads at most this
// many rows however large the table.
const StoredCountBound = 1000

// storedCounts counts the dead letters and timers the store holds. A
// failure is logged and leaves the count out: the rest of the overview
// still shows.
func (p *parts) storedCounts(ctx context.Context) StoredCounts {
	var out StoredCounts
	rc, re := p.caps.rowCounter, p.caps.rowEstimator
	counts, estimates := rc != nil, re != nil
	if !counts && !estimates {
		return out
	}
	var est map[string]int64
	count := func(table string) *StoredCount {
		n := int64(StoredCountBound)
		if counts {
			var err error
			if n, err = rc.CountRows(ctx, table, StoredCountBound); err != nil {
				p.log.WarnContext(ctx, "admin: count stored rows", "table", table, "error", err)
				return nil
			}
			if n < StoredCountBound {
				return &StoredCount{Count: n, Accuracy: AccuracyExact}
			}
		}
		if !estimates {
			return &StoredCount{Count: n, Accuracy: AccuracyAtLeast}
		}
		if est == nil {
			var err error
			if est, err = re.EstimateRows(ctx); err != nil {
				p.log.WarnContext(ctx, "admin: estimate stored rows", "error", err)
				est = map[string]int64{}
			}
		}
		e, ok := est[table]
		if !ok || (counts && e < n) {
			// The estimate lags (statistics not yet collected): the
			// bounded count is the better answer.
			return &StoredCount{Count: n, Accuracy: AccuracyAtLeast}
		}
		return &StoredCount{Count: e, Accuracy: AccuracyEstimate, Source: "the store's statistics"}
	}
	out.DeadLetters = p.unresolvedCount(ctx)
	if out.DeadLetters == nil {
		out.DeadLetters = count(readmodel.TableDeadLetters)
	}
	out.Timers = count(readmodel.TableTimers)
	return out
}

// unresolvedSample is how many dead letters the overview reads to
// estimate the unresolved ones when the store holds StoredCountBound or
// more (readmodel.RowCounter says so from an index).
const unresolvedSample = 250

// unresolvedCount counts the dead letters no replay resolved
// (store.DeadLettersUnresolved) and not archived. A readmodel.UnresolvedCounter
// counts them exactly up to StoredCountBound, and says "at least" above.
// Without one it reads at most
// StoredCountBound dead letters whatever their state: the unresolved
// filter is no index, so a query for them reads every stored dead letter
// when few are unresolved. When the store holds fewer, the count is exact;
// else it is an estimate, the share of unresolved ones among the first
// unresolvedSample by ID times the store's estimate of all. It returns nil when
// the store cannot select dead letters, or cannot estimate beyond the
// bound (the caller then counts the table).
func (p *parts) unresolvedCount(ctx context.Context) *StoredCount {
	if uc := p.caps.unresolvedCounter; uc != nil { // from an index: exact up to the bound
		n, err := uc.CountUnresolved(ctx, StoredCountBound+1)
		switch {
		case err != nil:
			p.log.WarnContext(ctx, "admin: count unresolved dead letters", "error", err)
			return nil
		case n > StoredCountBound:
			return &StoredCount{Count: StoredCountBound, Accuracy: AccuracyAtLeast}
		}
		return &StoredCount{Count: int64(n), Accuracy: AccuracyExact}
	}
	dq := p.caps.deadLetters
	if dq == nil {
		return nil
	}
	limit := StoredCountBound
	if rc := p.caps.rowCounter; rc != nil {
		if n, err := rc.CountRows(ctx, readmodel.TableDeadLetters, StoredCountBound); err == nil && n >= StoredCountBound {
			limit = unresolvedSample // an estimate anyway: read fewer
		}
	}
	ds, err := dq.QueryDeadLetters(ctx, &readmodel.DeadLetterQuery{State: store.DeadLettersAll, Archived: readmodel.ArchivedInclude, Limit: limit})
	if err != nil {
		p.log.WarnContext(ctx, "admin: count unresolved dead letters", "error", err)
		return nil
	}
	n := 0
	for i := range ds {
		if !ds[i].Archived() && ds[i].State() == store.DeadLettersUnresolved {
			n++
		}
	}
	if len(ds) < limit { // every stored dead letter
		return &StoredCount{Count: int64(n), Accuracy: AccuracyExact}
	}
	return p.scaledEstimate(ctx, n, len(ds))
}

// scaledEstimate scales n of read dead letters to the store's estimate of
// all it holds; nil when the store cannot estimate.
func (p *parts) scaledEstimate(ctx context.Context, n, read int) *StoredCount {
	re := p.caps.rowEstimator
	if re == nil {
		return nil
	}
	est, err := re.EstimateRows(ctx)
	if err != nil {
		p.log.WarnContext(ctx, "admin: estimate stored rows", "error", err)
		return nil
	}
	total := max(est[readmodel.TableDeadLetters], int64(read)) // the estimate may lag
	return &StoredCount{Count: int64(math.Round(float64(n) * float64(total) / float64(read))), Accuracy: AccuracyEstimate,
		Source: "a sample of the dead letters, scaled to the store's statistics"}
}

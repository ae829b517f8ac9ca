package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

func (p *parts) deadLetterCounts(ctx context.Context, f *inspect.DeadLetterFilter) (*DeadLetterCounts, error) {
	c, err := inspect.CountByReason(ctx, p.st, f)
	if err != nil {
		return nil, err
	}
	if c.ByReason == nil {
		c.ByReason = []inspect.ReasonCount{}
	}
	return &DeadLetterCounts{Total: c.Total, ByReason: c.ByReason, Exact: c.Exact, AsOf: c.AsOf}, nil
}

// bulkDeadLetters replays (or purges) every dead letter f selects as of
// f.AsOf, or as of now when f has no mark: never one recorded after the
// count the caller confirmed. On error it returns, with the error, what it
// did until then (nil when it did not start).
func (p *parts) bulkDeadLetters(ctx context.Context, f *inspect.DeadLetterFilter, replay, dry bool) (*BulkResult, error) {
	res := &BulkResult{DryRun: dry}
	if f.AsOf == "" {
		c, err := inspect.CountByReason(ctx, p.st, f)
		if err != nil {
			return nil, err
		}
		f.AsOf = c.AsOf
	}
	res.AsOf = f.AsOf
	err := inspect.EachDeadLetter(ctx, p.st, f, func(ds []store.DeadLetter) error {
		res.Matched += len(ds)
		if dry {
			return nil
		}
		if !replay {
			n, err := inspect.DeleteDeadLetters(ctx, p.st, f, ds)
			res.Done += n
			return err
		}
		for i := range ds {
			err := p.e.ReplayDeadLetter(ctx, ds[i].ID)
			switch {
			case errors.Is(err, store.ErrNotFound) || (err != nil && replayRefused(err) != ""):
				res.Skipped++ // gone, or its replay resolved or started, since its page was read
			case err != nil:
				return fmt.Errorf("replay dead letter %s: %w", ds[i].ID, err)
			default:
				res.Done++
			}
		}
		return nil
	})
	res.Message = bulkMessage(res, replay)
	if res.Skipped > 0 {
		res.Message += fmt.Sprintf(" (%d skipped: gone since they were listed)", res.Skipped)
	}
	return res, err
}

// bulkTriage runs a. On error it returns, with the error, what it did
// until then (nil when it did not start).
func (p *parts) bulkTriage(ctx context.Context, a *triageAction) (*BulkResult, error) {
	if a.Action == "archive" || a.Action == "restore" {
		if _, err := inspect.Archiver(p.st); err != nil {
			return nil, err
		}
	}
	if len(a.IDs) > 0 {
		return p.triageIDs(ctx, a)
	}
	if a.Action == "replay" || a.Action == "purge" {
		return p.bulkDeadLetters(ctx, a.Filter, a.Action == "replay", a.DryRun)
	}
	f := a.Filter
	if a.Action == "restore" && f.ArchivedBefore.IsZero() {
		f.Archived = readmodel.ArchivedOnly
	}
	res := &BulkResult{DryRun: a.DryRun}
	if f.AsOf == "" {
		c, err := inspect.CountByReason(ctx, p.st, f)
		if err != nil {
			return nil, err
		}
		f.AsOf = c.AsOf
	}
	res.AsOf = f.AsOf
	err := inspect.EachDeadLetter(ctx, p.st, f, func(ds []store.DeadLetter) error {
		res.Matched += len(ds)
		if a.DryRun {
			return nil
		}
		var n int
		var err error
		if a.Action == "archive" {
			n, err = inspect.ArchiveDeadLetters(ctx, p.st, f, ds)
		} else {
			ids := make([]string, len(ds))
			for i := range ds {
				ids[i] = ds[i].ID
			}
			n, err = inspect.RestoreDeadLetters(ctx, p.st, ids, f.AsOf)
		}
		res.Done += n
		res.Skipped += len(ds) - n
		return err
	})
	res.Message = triageMessage(a.Action, res)
	return res, err
}

// triageIDs acts on the dead letters a names.
func (p *parts) triageIDs(ctx context.Context, a *triageAction) (*BulkResult, error) {
	ids := uniqueIDs(a.IDs)
	res := &BulkResult{DryRun: a.DryRun, Matched: len(ids), AsOf: a.Filter.AsOf}
	if a.DryRun {
		res.Message = triageMessage(a.Action, res)
		return res, nil
	}
	var err error
	switch a.Action {
	case "archive":
		var ar readmodel.DeadLetterArchiver
		if ar, err = inspect.Archiver(p.st); err == nil {
			res.Done, err = ar.ArchiveDeadLetters(ctx, &readmodel.ArchiveParams{IDs: ids, AsOf: a.Filter.AsOf})
		}
	case "restore":
		res.Done, err = inspect.RestoreDeadLetters(ctx, p.st, ids, a.Filter.AsOf)
	case "replay":
		for _, id := range ids {
			rerr := p.e.ReplayDeadLetter(ctx, id)
			switch {
			case errors.Is(rerr, store.ErrNotFound) || (rerr != nil && replayRefused(rerr) != ""):
			case rerr != nil:
				err = fmt.Errorf("replay dead letter %s: %w", id, rerr)
			default:
				res.Done++
			}
			if err != nil {
				break
			}
		}
	default:
		return nil, fmt.Errorf("dead letters: unknown action %q", a.Action)
	}
	res.Skipped = res.Matched - res.Done
	res.Message = triageMessage(a.Action, res)
	return res, err
}

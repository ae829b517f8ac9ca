package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// PurgeRetention is how long a dead letter stays archived before the
// console offers to purge it: the console, the operator's tool, purges
// only archived dead letters, archived longer ago than this. The API and
// the CLI, the tools of scripts, purge what their filters select: the
// API's archived filter is exclude by default, as on every dead-letter
// route, so that an as_of from GET /api/dead-letters/counts with the same
// filters binds the purge; idem dlq purge --all takes --archived include
// by default, so that archiving never hides a dead letter from a purge.
const PurgeRetention = 7 * 24 * time.Hour

// Groups returns the groups of the dead letters f selects (see
// readmodel.DeadLetterGrouper), at most limit of them; ErrUnsupported when
// the store does not group, or f names a message type it cannot select
// (see readmodel.DeadLetterTypeQuerier).
func Groups(ctx context.Context, st store.Store, f *DeadLetterFilter, limit int) ([]readmodel.DeadLetterGroup, error) {
	g, ok := st.(readmodel.DeadLetterGrouper)
	if !ok || !selectsAll(st, f) {
		return nil, fmt.Errorf("group dead letters: %w", ErrUnsupported)
	}
	gs, err := g.GroupDeadLetters(ctx, f.query("", limit))
	if err != nil {
		return nil, fmt.Errorf("group dead letters: %w", err)
	}
	return gs, nil
}

// Archiver returns st as a readmodel.DeadLetterArchiver, or ErrUnsupported.
func Archiver(st store.Store) (readmodel.DeadLetterArchiver, error) {
	a, ok := st.(readmodel.DeadLetterArchiver)
	if !ok {
		return nil, fmt.Errorf("archive dead letters: %w (the store does not implement readmodel.DeadLetterArchiver)", ErrUnsupported)
	}
	return a, nil
}

// ArchiveDeadLetters archives the dead letters ds (selected with f) as of
// f.AsOf: one recorded again since is left alone.
func ArchiveDeadLetters(ctx context.Context, st store.Store, f *DeadLetterFilter, ds []store.DeadLetter) (int, error) {
	a, err := Archiver(st)
	if err != nil {
		return 0, err
	}
	n, err := a.ArchiveDeadLetters(ctx, &readmodel.ArchiveParams{IDs: ids(ds), AsOf: f.AsOf})
	if err != nil {
		return n, fmt.Errorf("archive %d dead letters: %w", len(ds), err)
	}
	return n, nil
}

// RestoreDeadLetters restores the archived dead letters among ids that
// the mark asOf selects ("" selects every one).
func RestoreDeadLetters(ctx context.Context, st store.Store, ids []string, asOf string) (int, error) {
	a, err := Archiver(st)
	if err != nil {
		return 0, err
	}
	n, err := a.RestoreDeadLetters(ctx, &readmodel.ArchiveParams{IDs: ids, AsOf: asOf})
	if err != nil {
		return n, fmt.Errorf("restore %d dead letters: %w", len(ids), err)
	}
	return n, nil
}

func ids(ds []store.DeadLetter) []string {
	out := make([]string, len(ds))
	for i := range ds {
		out[i] = ds[i].ID
	}
	return out
}

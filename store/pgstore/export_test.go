package pgstore

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// StatsCounts exposes the statistics path of EstimateInstanceCounts, which
// runs only above ExactCountBelow instances.
var StatsCounts = (*Store).statsCounts

// EndStalled runs one pass of s's watchdog, as its loop does every
// stalledEvery.
func EndStalled(ctx context.Context, s *Store) { s.endStalled(ctx) }

// SessionParams is the session settings Open gives every connection for a
// lease.
var SessionParams = sessionParams

// Migrations exposes the embedded migrations, to build an older schema.
func Migrations() ([]string, []string, error) { return sqlq.Migrations(migrationFiles) }

// QueueInstanceWrites queues on b the statements Commit sends for inserts
// and for updates guarded by their versions.
func QueueInstanceWrites(b *pgx.Batch, inserts, updates []*store.Instance) error {
	if err := queueInstances(b, insertInstancesSQL, inserts, false); err != nil {
		return err
	}
	return queueInstances(b, updateInstancesSQL, updates, true)
}

// SetNotifySpacing sets the least time between two NOTIFYs of s, before
// its first commit.
func SetNotifySpacing(s *Store, d time.Duration) {
	s.notifySpacing = d
	s.notifySent.Store(-int64(d))
}

// ClaimShare runs one claim of ReceiveShare, without waiting.
func ClaimShare(ctx context.Context, s *Store, n int, sh transport.Share) ([]transport.Delivery, time.Time, error) {
	return s.claimShare(ctx, n, sh)
}

// ExplainShare returns the plan of one claim of ReceiveShare, in a
// transaction rolled back.
func ExplainShare(ctx context.Context, s *Store, n int, sh transport.Share) (string, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) "+receiveShareSQL, n, "explain", s.cfg.Lease.Seconds(), sh.Part, sh.Parts, sh.StealAfter.Seconds())
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

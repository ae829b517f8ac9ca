package pgstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/transport"
)

var _ transport.SharedConsumer = (*Store)(nil)

// receiveShareSQL claims up to $1 visible messages of partition $4 of $5
// for a lease of $3 seconds under token $2, or, when that partition has
// none visible and unlocked, those of any partition visible for $6
// seconds or more (stolen). When it claims nothing it returns one row
// whose last column is the next time it could claim anything: its own
// partition's next visible message, or any message's $6 seconds after it
// is visible. One statement, so an empty receive costs one round trip.
// (The outer scan does not see the CTE's update; it reads only when the
// update claimed nothing.)
const receiveShareSQL = `
WITH own AS (
  SELECT seq FROM idem_queue
  WHERE visible_at <= now() AND ($5 < 2 OR mod(part, $5) = $4)
  ORDER BY visible_at, seq
  LIMIT $1
  FOR UPDATE SKIP LOCKED
), stolen AS (
  SELECT seq FROM idem_queue
  WHERE $5 >= 2 AND NOT EXISTS (SELECT 1 FROM own)
    AND visible_at <= now() - make_interval(secs => $6)
  ORDER BY visible_at, seq
  LIMIT $1
  FOR UPDATE SKIP LOCKED
), c AS (
  UPDATE idem_queue q
  SET attempt = q.attempt + 1, token = $2, visible_at = now() + make_interval(secs => $3)
  WHERE q.seq IN (SELECT seq FROM own UNION ALL SELECT seq FROM stolen)
  RETURNING q.seq, q.envelope, q.body, q.attempt
)
SELECT seq, envelope, body, attempt, NULL::timestamptz FROM c
UNION ALL
SELECT NULL, NULL, NULL, NULL, LEAST(
  (SELECT min(visible_at) FROM idem_queue WHERE $5 < 2 OR mod(part, $5) = $4),
  CASE WHEN $5 >= 2 THEN (SELECT min(visible_at) FROM idem_queue) + make_interval(secs => $6) END)
WHERE NOT EXISTS (SELECT 1 FROM c)`

// ReceiveShare is Receive restricted to a replica's share of the queue
// (transport.SharedConsumer), read from share before each claim: the
// messages of partition Part of Parts (as ReceivePartition), or, when it
// has none visible, any visible for StealAfter or longer. It waits as
// Receive does, until the next time it could claim any of them.
func (s *Store) ReceiveShare(ctx context.Context, n int, share func() transport.Share) ([]transport.Delivery, error) {
	n = max(n, 1)
	s.startListener()
	return s.poller().Receive(ctx, "pgstore: receive", nil, func(ctx context.Context) ([]transport.Delivery, time.Time, error) {
		sh := share()
		if sh.Parts >= 2 && (sh.Part < 0 || sh.Part >= sh.Parts) {
			return nil, time.Time{}, fmt.Errorf("pgstore: receive share: partition %d of %d: want 0 <= part < parts", sh.Part, sh.Parts)
		}
		if sh.StealAfter < 0 {
			return nil, time.Time{}, fmt.Errorf("pgstore: receive share: StealAfter %v is negative", sh.StealAfter)
		}
		return s.claimShare(ctx, n, sh)
	})
}

// claimShare runs receiveShareSQL once.
func (s *Store) claimShare(ctx context.Context, n int, sh transport.Share) ([]transport.Delivery, time.Time, error) {
	tok := sqlq.NewToken()
	rows, err := s.pool.Query(ctx, receiveShareSQL, n, tok, s.cfg.Lease.Seconds(), sh.Part, sh.Parts, sh.StealAfter.Seconds())
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("pgstore: receive: %w", translate(err))
	}
	defer rows.Close()
	type row struct {
		seq int64
		d   transport.Delivery
	}
	var got []row
	var next pgtype.Timestamptz
	for rows.Next() {
		var seq pgtype.Int8
		var attempt pgtype.Int4
		var meta, body []byte
		if err := rows.Scan(&seq, &meta, &body, &attempt, &next); err != nil {
			return nil, time.Time{}, fmt.Errorf("pgstore: receive: %w", err)
		}
		if !seq.Valid {
			continue // the next-visible row of an empty claim
		}
		r := row{seq: seq.Int64, d: transport.Delivery{Attempt: int(attempt.Int32), Token: sqlq.FormatToken(seq.Int64, tok)}}
		if r.d.Envelope, err = sqlq.DecodeEnvelope(meta, body); err != nil {
			return nil, time.Time{}, err
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("pgstore: receive: %w", translate(err))
	}
	slices.SortFunc(got, func(a, b row) int { return int(a.seq - b.seq) })
	ds := make([]transport.Delivery, len(got))
	for i := range got {
		ds[i] = got[i].d
	}
	return ds, nextTime(next), nil
}

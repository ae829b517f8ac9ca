package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

var _ store.TokenStore = (*Store)(nil)

const loadTokensSQL = `
SELECT t.id FROM unnest($1::text[]) AS u(id)
CROSS JOIN LATERAL (SELECT id FROM idem_tokens t WHERE t.id = u.id LIMIT 1) t`

const mintTokensSQL = `
INSERT INTO idem_tokens (id, minted_at)
SELECT * FROM unnest($1::text[], $2::timestamptz[])
ON CONFLICT (id) DO NOTHING`

// claimTokensSQL deletes the claimed tokens and fails with ID001 (a
// conflict) unless every one of them was still there: another unit of
// work claimed one since the load.
const claimTokensSQL = `
WITH gone AS (
  DELETE FROM idem_tokens t USING unnest($1::text[]) AS u(id) WHERE t.id = u.id
  RETURNING 1
)
SELECT idem_expect((SELECT count(*) FROM gone), $2, 'token claim')`

// queueLoadTokens adds the token lookup to a load's batch.
func queueLoadTokens(b *pgx.Batch, ids []string, res *store.LoadResult) {
	if len(ids) == 0 {
		return
	}
	res.Tokens = make(map[string]bool, len(ids))
	b.Queue(loadTokensSQL, ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			res.Tokens[id] = true
		}
		return rows.Err()
	})
}

// queueTokenWrites adds a commit's mints and claims to its batch.
func queueTokenWrites(b *pgx.Batch, c *store.Changes) {
	if n := len(c.MintTokens); n > 0 {
		ids, at := make([]string, n), make([]time.Time, n)
		for i, t := range c.MintTokens {
			ids[i], at[i] = t.ID, t.MintedAt
		}
		b.Queue(mintTokensSQL, ids, at)
	}
	if n := len(c.ClaimTokens); n > 0 {
		b.Queue(claimTokensSQL, c.ClaimTokens, int64(n))
	}
}

// MintTokens stores tokens outside any unit of work; existing tokens are
// left as they are.
func (s *Store) MintTokens(ctx context.Context, ts []store.Token) error {
	if err := s.check("mint tokens"); err != nil {
		return err
	}
	if len(ts) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	queueTokenWrites(b, &store.Changes{MintTokens: ts})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("pgstore: mint %d tokens: %w", len(ts), translate(err))
	}
	return nil
}

// CountTokens counts the tokens not yet claimed.
func (s *Store) CountTokens(ctx context.Context) (int, error) {
	if err := s.check("count tokens"); err != nil {
		return 0, err
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM idem_tokens`).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore: count tokens: %w", translate(err))
	}
	return n, nil
}

var _ store.TokenSweeper = (*Store)(nil)

// countStaleTokensSQL reads at most $2 entries of idem_tokens_minted_at
// (migration 016).
const countStaleTokensSQL = `
SELECT count(*) FROM (SELECT 1 FROM idem_tokens t WHERE minted_at < $1 AND ` + notDeadLettered + ` LIMIT $2) AS t`

// notDeadLettered keeps out a token t whose message has a dead letter (its
// ID is the token's dedup part, after the first U+001F): a replay needs it.
const notDeadLettered = `NOT EXISTS (SELECT 1 FROM idem_dead_letters d WHERE d.id = substr(t.id, strpos(t.id, chr(31)) + 1))`

// sweepTokensSQL reads at most $2 tokens minted before $1 and after the
// cursor ($3, $4), in sweep order (idem_tokens_minted_at, then the ID:
// tokens minted in one commit share minted_at), skipping those another
// sweeper or a claim holds; deletes those whose message has no dead
// letter (by their IDs, through the primary key: a join with the batch
// would be planned as a hash of the whole table); and returns how many it
// read and deleted, and the last one read.
const sweepTokensSQL = `
WITH batch AS (
  SELECT id, minted_at FROM idem_tokens
  WHERE minted_at < $1 AND minted_at >= $3 AND (minted_at > $3 OR id COLLATE "C" > $4)
  ORDER BY minted_at, id COLLATE "C" LIMIT $2 FOR UPDATE SKIP LOCKED
), gone AS (
  DELETE FROM idem_tokens t WHERE t.id = ANY(ARRAY(SELECT id FROM batch)) AND ` + notDeadLettered + ` RETURNING 1
), last AS (
  SELECT minted_at, id FROM batch ORDER BY minted_at DESC, id COLLATE "C" DESC LIMIT 1
)
SELECT (SELECT count(*) FROM batch), (SELECT count(*) FROM gone), (SELECT minted_at FROM last), (SELECT id FROM last)`

// CountStaleTokens counts the tokens minted before p.MintedBefore, up to
// p.Limit; see store.TokenSweeper.
func (s *Store) CountStaleTokens(ctx context.Context, p *store.StaleTokens) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("pgstore: count %w", err)
	}
	if err := s.check("count stale tokens"); err != nil {
		return 0, err
	}
	if p.MintedBefore.IsZero() {
		return 0, nil
	}
	var n int
	if err := s.pool.QueryRow(ctx, countStaleTokensSQL, p.MintedBefore, p.Limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore: count stale tokens: %w", translate(err))
	}
	return n, nil
}

// SweepTokens reads at most p.Limit tokens minted before p.MintedBefore
// and after p.After, oldest first, and deletes those whose message has no
// dead letter; see store.TokenSweeper.
func (s *Store) SweepTokens(ctx context.Context, p *store.StaleTokens) (*store.TokenSweep, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: sweep %w", err)
	}
	if err := s.check("sweep tokens"); err != nil {
		return nil, err
	}
	r := &store.TokenSweep{}
	if p.MintedBefore.IsZero() {
		return r, nil
	}
	var after store.TokenCursor // the zero time and "": before every token
	if p.After != nil {
		after = *p.After
	}
	var last *time.Time
	var lastID *string
	err := s.pool.QueryRow(ctx, sweepTokensSQL, p.MintedBefore, p.Limit, after.MintedAt, after.ID).Scan(&r.Read, &r.Deleted, &last, &lastID)
	if err != nil {
		return nil, fmt.Errorf("pgstore: sweep tokens minted before %s: %w", p.MintedBefore.Format(time.RFC3339), translate(err))
	}
	if r.Read == p.Limit && last != nil && lastID != nil {
		r.Next = &store.TokenCursor{MintedAt: last.UTC(), ID: *lastID}
	}
	return r, nil
}

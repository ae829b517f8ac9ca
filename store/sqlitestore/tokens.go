package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/idemhq/idem/store"
)

var _ store.TokenStore = (*Store)(nil)

const loadTokenSQL = `SELECT 1 FROM idem_tokens WHERE id = ?1`

const mintTokenSQL = `INSERT INTO idem_tokens (id, minted_at) VALUES (?1, ?2) ON CONFLICT (id) DO NOTHING`

const claimTokenSQL = `DELETE FROM idem_tokens WHERE id = ?1`

// loadTokens reports which of ids exist, in the load's read transaction.
func loadTokens(ctx context.Context, tx *sql.Tx, ids []string) (map[string]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		var one int
		err := tx.QueryRowContext(ctx, loadTokenSQL, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: load token %q: %w", id, err)
		}
		out[id] = true
	}
	return out, nil
}

// tokenOps are a commit's statements for the token inbox: a claim that
// deletes no row lost a race to another unit of work.
func tokenOps(c *store.Changes) []op {
	var ops []op
	for _, t := range c.MintTokens {
		ops = append(ops, op{sql: mintTokenSQL, args: []any{t.ID, micros(t.MintedAt)}})
	}
	for _, id := range c.ClaimTokens {
		ops = append(ops, op{sql: claimTokenSQL, args: []any{id}, check: func(n int64, err error) error {
			if err == nil && n != 1 {
				return fmt.Errorf("%w: claim token %q: already claimed", store.ErrConflict, id)
			}
			return err
		}})
	}
	return ops
}

// MintTokens stores tokens outside any unit of work; existing tokens are
// left as they are.
func (s *Store) MintTokens(ctx context.Context, ts []store.Token) error {
	if len(ts) == 0 {
		return nil
	}
	ops := tokenOps(&store.Changes{MintTokens: ts})
	err := s.write(ctx, "mint tokens", 0, func(w *writer) error {
		for _, o := range ops {
			if _, err := w.exec(o.sql, o.args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: mint %d tokens: %w", len(ts), err)
	}
	return nil
}

// CountTokens counts the tokens not yet claimed.
func (s *Store) CountTokens(ctx context.Context) (int, error) {
	if err := s.check("count tokens"); err != nil {
		return 0, err
	}
	var n int
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM idem_tokens`).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlitestore: count tokens: %w", err)
	}
	return n, nil
}

var _ store.TokenSweeper = (*Store)(nil)

// countStaleTokensSQL reads at most ?2 entries of idem_tokens_minted_at
// (migration 016).
const countStaleTokensSQL = `
SELECT count(*) FROM (SELECT 1 FROM idem_tokens t WHERE minted_at < ?1 AND ` + notDeadLettered + ` LIMIT ?2)`

// notDeadLettered keeps out a token t whose message has a dead letter (its
// ID is the token's dedup part, after the first U+001F): a replay needs it.
const notDeadLettered = `NOT EXISTS (SELECT 1 FROM idem_dead_letters d WHERE d.id = substr(t.id, instr(t.id, char(31)) + 1))`

// tokenBatch selects at most ?2 tokens minted before ?1 and after the
// cursor (?3, ?4), in sweep order (idem_tokens_minted_at, then the ID:
// tokens minted in one commit share minted_at).
const tokenBatch = `SELECT id, minted_at FROM idem_tokens
WHERE minted_at < ?1 AND minted_at >= ?3 AND (minted_at > ?3 OR id > ?4)
ORDER BY minted_at, id LIMIT ?2`

// readTokenBatchSQL reads a sweep's batch; sweepTokensSQL deletes the
// tokens of the same batch whose message has no dead letter.
const (
	readTokenBatchSQL = tokenBatch
	sweepTokensSQL    = `DELETE FROM idem_tokens WHERE id IN (SELECT id FROM (` + tokenBatch + `) t WHERE ` + notDeadLettered + `)`
)

// CountStaleTokens counts the tokens minted before p.MintedBefore, up to
// p.Limit; see store.TokenSweeper.
func (s *Store) CountStaleTokens(ctx context.Context, p *store.StaleTokens) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("sqlitestore: count %w", err)
	}
	if err := s.check("count stale tokens"); err != nil {
		return 0, err
	}
	if p.MintedBefore.IsZero() {
		return 0, nil
	}
	var n int
	if err := s.rdb.QueryRowContext(ctx, countStaleTokensSQL, micros(p.MintedBefore), p.Limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlitestore: count stale tokens: %w", err)
	}
	return n, nil
}

// SweepTokens reads at most p.Limit tokens minted before p.MintedBefore
// and after p.After, oldest first, and deletes those whose message has no
// dead letter; see store.TokenSweeper.
func (s *Store) SweepTokens(ctx context.Context, p *store.StaleTokens) (*store.TokenSweep, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("sqlitestore: sweep %w", err)
	}
	if err := s.check("sweep tokens"); err != nil {
		return nil, err
	}
	r := &store.TokenSweep{}
	if p.MintedBefore.IsZero() {
		return r, nil
	}
	args := []any{micros(p.MintedBefore), p.Limit, int64(math.MinInt64), ""}
	if p.After != nil {
		args[2], args[3] = micros(p.After.MintedAt), p.After.ID
	}
	err := s.write(ctx, "sweep tokens", 0, func(w *writer) error {
		*r = store.TokenSweep{} // a group that fails runs it again alone
		last, err := readTokenBatch(w, r, args)
		if err != nil {
			return err
		}
		n, err := w.exec(sweepTokensSQL, args...)
		r.Deleted = int(n)
		if r.Read == p.Limit {
			r.Next = last
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: sweep tokens minted before %s: %w", p.MintedBefore.Format(time.RFC3339), err)
	}
	return r, nil
}

// readTokenBatch counts the tokens of a sweep's batch into r.Read and
// returns the last one.
func readTokenBatch(w *writer, r *store.TokenSweep, args []any) (*store.TokenCursor, error) {
	rows, err := w.query(readTokenBatchSQL, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	last := &store.TokenCursor{}
	for rows.Next() {
		var us int64
		if err := rows.Scan(&last.ID, &us); err != nil {
			return nil, err
		}
		last.MintedAt = fromMicros(us)
		r.Read++
	}
	return last, rows.Err()
}

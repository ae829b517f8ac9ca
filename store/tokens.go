package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Token is a dedup token of the token inbox: minted by the sender of a
// message, in the commit that stores the message, and claimed (deleted) by
// the unit of work that applies it. A message that arrives after its token
// was claimed is a duplicate, however late it arrives: unlike inbox
// records, tokens have no retention window.
type Token struct {
	// ID is the message's dedup identity: its type, U+001F, and its
	// envelope's DedupID.
	ID string `json:"id"`
	// MintedAt is when the token was minted: operators see it, and
	// TokenSweeper counts and deletes unclaimed tokens by it.
	MintedAt time.Time `json:"minted_at"`
}

// TokenStore is implemented by stores that keep dedup tokens. Such a store
// also honours LoadParams.Tokens, LoadResult.Tokens, Changes.MintTokens and
// Changes.ClaimTokens in its units of work, with these rules (checked by
// storetest):
//
//   - Load reports in LoadResult.Tokens which requested tokens exist;
//   - Commit mints Changes.MintTokens (an existing token is left as it is)
//     and deletes Changes.ClaimTokens together with every other change;
//   - claiming a token that no longer exists (another unit of work claimed
//     it since Load) fails the commit with an error wrapping ErrConflict,
//     so that the engine reloads and finds the message a duplicate;
//   - Sweep never deletes tokens, whatever its parameters (only
//     TokenSweeper.SweepTokens does).
type TokenStore interface {
	Store
	// MintTokens stores tokens outside any unit of work, for messages
	// published from outside a saga; existing tokens are left as they are.
	MintTokens(ctx context.Context, ts []Token) error
	// CountTokens counts the tokens minted and not yet claimed.
	CountTokens(ctx context.Context) (int, error)
}

// TokenSweeper is implemented by token stores that find and delete tokens
// nobody claimed, by their MintedAt, through an index on it: their cost
// grows with the tokens they select, not with the tokens stored. A token
// minted and never claimed belongs to a message that was lost before its
// consumer applied it, is dead-lettered, or waits for a consumer that is
// down; once it is deleted, that message is skipped as a duplicate if it
// ever arrives. A token whose message has a dead letter is neither counted
// nor swept: a replay of the dead letter needs it, or the replay would be
// skipped as a duplicate (TokenDedupID names the dead letter a token
// belongs to). Implementations must pass storetest.
type TokenSweeper interface {
	// CountStaleTokens counts the tokens minted before p.MintedBefore, up
	// to p.Limit: it returns p.Limit when there are p.Limit or more.
	CountStaleTokens(ctx context.Context, p *StaleTokens) (int, error)
	// SweepTokens reads, oldest first (by MintedAt, then ID), at most
	// p.Limit tokens minted before p.MintedBefore and after p.After,
	// deletes those whose message has no dead letter, and says how many
	// it read and deleted and where the next batch starts
	// (TokenSweep.Next). A pass that passes each batch's Next to the next
	// one reads every token once, so the tokens it keeps cost one read a
	// pass, not one per batch. A zero MintedBefore reads nothing.
	SweepTokens(ctx context.Context, p *StaleTokens) (*TokenSweep, error)
}

// StaleTokens selects unclaimed tokens by age for TokenSweeper.
type StaleTokens struct {
	// MintedBefore selects the tokens minted before it; the zero time
	// selects none.
	MintedBefore time.Time
	// Limit bounds the tokens counted, or read by a sweep; it must be
	// positive.
	Limit int
	// After, when set, makes SweepTokens read only the tokens after it
	// (a previous batch's TokenSweep.Next); CountStaleTokens ignores it.
	After *TokenCursor
}

// Validate returns an error naming what is wrong with p: a nil p, or a
// Limit that is not positive.
func (p *StaleTokens) Validate() error {
	switch {
	case p == nil:
		return errors.New("stale tokens: no parameters (nil *StaleTokens)")
	case p.Limit <= 0:
		return fmt.Errorf("stale tokens: Limit is %d: want a positive bound", p.Limit)
	}
	return nil
}

// TokenSep separates a token's message type from its message's dedup
// identity in the token's ID (idem.TokenID).
const TokenSep = "\x1f"

// TokenDedupID returns the dedup identity in token ID id: the ID of the
// dead letter its message would have, were it dead-lettered.
func TokenDedupID(id string) string {
	if i := strings.Index(id, TokenSep); i >= 0 {
		return id[i+len(TokenSep):]
	}
	return id
}

package store

import (
	"context"
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
	// MintedAt is when the token was minted, for operators; no sweep
	// deletes tokens by age.
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
//   - Sweep never deletes tokens, whatever its parameters.
type TokenStore interface {
	Store
	// MintTokens stores tokens outside any unit of work, for messages
	// published from outside a saga; existing tokens are left as they are.
	MintTokens(ctx context.Context, ts []Token) error
	// CountTokens counts the tokens minted and not yet claimed.
	CountTokens(ctx context.Context) (int, error)
}

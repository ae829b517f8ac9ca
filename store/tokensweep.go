package store

import "time"

// TokenCursor is a position in the order SweepTokens reads tokens: by
// MintedAt, then by ID.
type TokenCursor struct {
	MintedAt time.Time `json:"minted_at"`
	ID       string    `json:"id"`
}

// TokenSweep is what one SweepTokens batch did.
type TokenSweep struct {
	// Deleted is how many tokens the batch deleted.
	Deleted int
	// Read is how many tokens the batch read, at most StaleTokens.Limit:
	// those it deleted and those it kept (their message has a dead
	// letter).
	Read int
	// Next is where the next batch of the same pass starts (pass it as
	// StaleTokens.After): just after the last token this batch read. It
	// is nil when the batch read fewer than Limit tokens: the pass has
	// read every token minted before StaleTokens.MintedBefore.
	Next *TokenCursor
}

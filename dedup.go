package idem

import (
	"fmt"

	"github.com/idemhq/idem/transport"
)

// Dedup chooses how the messages an engine emits are deduplicated by
// their consumers. The zero value is DedupRetention.
type Dedup int

const (
	// DedupRetention relies on the consumers' inbox records alone, which
	// the sweeper deletes after Config.Retention: a duplicate that arrives
	// later than that is applied again. No extra writes.
	DedupRetention Dedup = iota
	// DedupToken also mints a dedup token for every message a saga emits,
	// in the commit that stores the message, and marks the envelope with
	// transport.HeaderToken. The consumer claims (deletes) the token in the
	// unit of work that applies the message; a copy that arrives after
	// the claim is a duplicate, however late. It needs a store that
	// implements store.TokenStore shared by senders and consumers, and a
	// consumer of each message type in an engine on that store: a token
	// nobody claims stays until the sweeper deletes it, after
	// Config.TokenRetention; a copy arriving later is then a duplicate
	// too. Costs one more row
	// written per emitted message and one more row read and deleted per
	// consumed one, in the unit of work's existing round trips.
	DedupToken
)

// String returns "retention" or "token".
func (d Dedup) String() string {
	switch d {
	case DedupRetention:
		return "retention"
	case DedupToken:
		return "token"
	}
	return fmt.Sprintf("Dedup(%d)", int(d))
}

// ParseDedup parses "retention" or "token" (as String writes them).
func ParseDedup(s string) (Dedup, error) {
	switch s {
	case "retention", "":
		return DedupRetention, nil
	case "token":
		return DedupToken, nil
	}
	return 0, fmt.Errorf("idem: unknown dedup mode %q: use retention or token", s)
}

// ErrNoTokens is returned by NewEngine with Config.Dedup set to DedupToken,
// and by PublishWithTokens, when the store does not implement
// store.TokenStore.
var ErrNoTokens = fmt.Errorf("the store keeps no dedup tokens (store.TokenStore)")

// checkDedup refuses a Dedup the store cannot serve.
func checkDedup(c *Config, caps capabilities) error {
	switch c.Dedup {
	case DedupRetention:
		return nil
	case DedupToken:
		if caps.tokens == nil {
			return fmt.Errorf("idem: Config.Dedup is token but %w: use memstore, sqlitestore or pgstore, or DedupRetention", ErrNoTokens)
		}
		return nil
	}
	return fmt.Errorf("idem: Config.Dedup is %d: use DedupRetention or DedupToken", int(c.Dedup))
}

// TokenID returns the ID of env's dedup token: its type, U+001F and its
// DedupID, as in a saga's inbox record. A program that mints tokens itself
// (store.TokenStore.MintTokens) and marks envelopes with
// transport.HeaderToken must use it; PublishWithTokens does both.
func TokenID(env *Envelope) string { return env.Type + inboxTypeSep + env.DedupID() }

// tokened reports whether env says its sender minted a token.
func tokened(env *Envelope) bool { return env.Headers[transport.HeaderToken] == "1" }

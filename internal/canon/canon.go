// Package canon canonicalises saga keys: Unicode NFC, surrounding white
// space trimmed; empty keys, invalid UTF-8, control characters and keys
// longer than a limit are refused.
package canon

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// DefaultMaxLen is the default limit on a canonical key, in bytes.
const DefaultMaxLen = 256

// Errors wrapped by Key; each names one reason a key is refused.
var (
	ErrEmpty    = errors.New("empty key")
	ErrTooLong  = errors.New("key too long")
	ErrControl  = errors.New("key contains a control character")
	ErrEncoding = errors.New("key is not valid UTF-8")
)

// Key returns the canonical form of raw, or an error wrapping one of the
// package's errors. maxLen < 1 means DefaultMaxLen.
func Key(raw string, maxLen int) (string, error) {
	if maxLen < 1 {
		maxLen = DefaultMaxLen
	}
	if !utf8.ValidString(raw) {
		return "", fmt.Errorf("key %q: %w", raw, ErrEncoding)
	}
	k := strings.TrimSpace(norm.NFC.String(raw))
	if k == "" {
		return "", ErrEmpty
	}
	if len(k) > maxLen {
		return "", fmt.Errorf("key of %d bytes, limit %d: %w", len(k), maxLen, ErrTooLong)
	}
	for i, r := range k {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return "", fmt.Errorf("key %q at byte %d: %w", k, i, ErrControl)
		}
	}
	return k, nil
}

// PartitionKey is the string a transport hashes to choose an envelope's
// partition: the canonical form of correlationID, so that the NFC and NFD
// forms of one key always share a partition (and so a consumer, and so an
// order). A correlation ID that is not a valid key is used as it is (the
// consumer dead-letters it), and an empty one falls back to id.
func PartitionKey(correlationID, id string) string {
	if correlationID == "" {
		return id
	}
	// No length limit here (NFC can make a key up to three times longer
	// than its raw form): the limit is the engine's to enforce.
	if k, err := Key(correlationID, 3*len(correlationID)+4); err == nil {
		return k
	}
	return correlationID
}

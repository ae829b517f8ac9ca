// Package canon holds the canonical forms Idem stores and compares: a saga
// key is Unicode NFC with surrounding white space trimmed (empty keys,
// invalid UTF-8, control characters and keys longer than a limit are
// refused), and a searchable attribute's value is NFC too.
//
// The engine files every saga under Key's form of its correlation key, so
// the NFC and NFD spellings of one key reach one saga; transports choose a
// partition from the same form (transport.PartitionKey); stores and
// operations tools compare filters in it (Lookup, Prefix,
// AttributeFilter). A store, transport or tool written outside this module
// uses these functions to agree with the engine.
//
// Every function is pure and safe for concurrent use. This package imports
// the standard library and golang.org/x/text/unicode/norm only.
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

// Key returns the canonical form of the saga key raw: raw in Unicode NFC
// with surrounding white space trimmed. It refuses raw with an error
// wrapping ErrEncoding (not valid UTF-8), ErrEmpty (nothing left after
// trimming), ErrTooLong (more than maxLen bytes once canonical) or
// ErrControl (a control character inside). maxLen < 1 means DefaultMaxLen.
// Key is idempotent: Key(k, maxLen) returns k for every k it returned.
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

// MaxAttributeBytes bounds the canonical form of an attribute value, and
// MaxAttributeName an attribute's name, in bytes: both are indexed.
const (
	MaxAttributeBytes = 256
	MaxAttributeName  = 64
)

// Errors wrapped by AttributeValue and AttributeName.
var (
	ErrAttributeValue = errors.New("invalid attribute value")
	ErrAttributeName  = errors.New("invalid attribute name")
)

// AttributeValue returns the canonical (NFC) form of an attribute value, or
// an error wrapping ErrAttributeValue when v is not valid UTF-8, holds a
// control character (U+0000, which PostgreSQL cannot store, a newline or
// a terminal escape, which would garble what the CLI prints) or is longer
// than MaxAttributeBytes once canonical. The empty value is valid: it means the
// attribute is absent.
func AttributeValue(v string) (string, error) {
	if !utf8.ValidString(v) {
		return "", fmt.Errorf("%w: %q is not valid UTF-8", ErrAttributeValue, v)
	}
	for i, r := range v {
		if unicode.IsControl(r) {
			return "", fmt.Errorf("%w: %q holds the control character %U at byte %d", ErrAttributeValue, v, r, i)
		}
	}
	c := norm.NFC.String(v)
	if len(c) > MaxAttributeBytes {
		return "", fmt.Errorf("%w: %d bytes, limit %d", ErrAttributeValue, len(c), MaxAttributeBytes)
	}
	return c, nil
}

// AttributeName reports whether name is a valid attribute name: 1 to
// MaxAttributeName bytes of ASCII letters, digits, '_', '-' and '.',
// starting with a letter. The error wraps ErrAttributeName.
func AttributeName(name string) error {
	if name == "" || len(name) > MaxAttributeName {
		return fmt.Errorf("%w: %q must have 1 to %d bytes", ErrAttributeName, name, MaxAttributeName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if letter || i > 0 && (c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			continue
		}
		return fmt.Errorf("%w: %q: only ASCII letters, digits, '_', '-' and '.', starting with a letter", ErrAttributeName, name)
	}
	return nil
}

// AttributeFilter returns the canonical form of a query's attribute
// filters (name to value), and false when one of them can match no stored
// attribute: an invalid name, or an empty or invalid value.
func AttributeFilter(attrs map[string]string) (map[string]string, bool) {
	if len(attrs) == 0 {
		return nil, true
	}
	out := make(map[string]string, len(attrs))
	for name, v := range attrs {
		c, err := AttributeValue(v)
		if err != nil || c == "" || AttributeName(name) != nil {
			return nil, false
		}
		out[name] = c
	}
	return out, true
}

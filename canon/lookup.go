package canon

import (
	"math"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Lookup returns the form of raw to find a stored saga key by, for the
// filters of operations tools: the canonical form (Key) when raw is a
// valid key, whatever its length, and raw itself otherwise (a dead letter
// keeps, as it came, a key the engine refused).
func Lookup(raw string) string {
	if k, err := Key(raw, math.MaxInt); err == nil {
		return k
	}
	return raw
}

// Prefix returns the form of a key prefix to compare with canonical keys:
// NFC, with leading white space trimmed as Key trims it (trailing white
// space is kept: it may be inside a key). A prefix that is not valid
// UTF-8 is returned as it is, and matches no canonical key.
func Prefix(raw string) string {
	if !utf8.ValidString(raw) {
		return raw
	}
	return strings.TrimLeftFunc(norm.NFC.String(raw), unicode.IsSpace)
}

package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// FingerprintNone is the readmodel.DeadLetterQuery.Fingerprint that selects the dead
// letters recorded before the stores kept fingerprints (their Fingerprint
// is ""). No fingerprint Fingerprint returns equals it.
const FingerprintNone = "none"

// maxMasked bounds the text MaskError reads, in bytes.
const maxMasked = 4 << 10

// quoted masks quoted strings (their content is data): double-quoted
// with escapes, backquoted, and single-quoted after a non-word character
// (an apostrophe inside a word is not a quote).
var quoted = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`"(?:[^"\\]|\\.)*"`), `"…"`},
	{regexp.MustCompile("`[^`]*`"), "`…`"},
	{regexp.MustCompile(`(^|[^A-Za-z0-9_])'[^']*'`), `${1}'…'`},
}

// wordByte reports whether c belongs to a word as maskWords splits them:
// ASCII letters, digits, '_' and '-' (so that UUIDs and IDs like ord-42
// are one word).
func wordByte(c byte) bool {
	return c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// maskWords replaces with # every word that holds a digit (IDs, numbers,
// UUIDs, durations, addresses) or is a run of 8 or more hex digits.
func maskWords(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if !wordByte(s[i]) {
			b.WriteByte(s[i])
			i++
			continue
		}
		j := i
		digit, hex := false, true
		for j < len(s) && wordByte(s[j]) {
			c := s[j]
			digit = digit || '0' <= c && c <= '9'
			hex = hex && ('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F')
			j++
		}
		if digit || (hex && j-i >= 8) {
			b.WriteByte('#')
		} else {
			b.WriteString(s[i:j])
		}
		i = j
	}
	return b.String()
}

// MaskError returns the first line of an error chain with what varies
// between occurrences of one failure masked: quoted strings become "…",
// and UUIDs, hex and every word holding a digit (IDs, numbers) become #.
// Runs of white space become one space. Invalid UTF-8 is replaced, and at
// most the first 4 KiB are read. It is pure and safe for concurrent use.
func MaskError(errText string) string {
	line, _, _ := strings.Cut(errText, "\n")
	if len(line) > maxMasked {
		line = line[:maxMasked]
	}
	line = strings.ToValidUTF8(line, "\uFFFD")
	for _, m := range quoted {
		line = m.re.ReplaceAllString(line, m.repl)
	}
	return strings.Join(strings.Fields(maskWords(line)), " ")
}

// Fingerprint returns the fingerprint of a failure: 16 lowercase hex
// digits of the SHA-256 of the reason and MaskError of the error text.
// Two dead letters whose errors differ only by IDs, numbers or quoted
// values share it; a different reason or different words give another.
// Stores set DeadLetter.Fingerprint with it when they record a dead
// letter. It is pure and safe for concurrent use.
func Fingerprint(reason, errText string) string {
	h := sha256.Sum256([]byte(reason + "\x00" + MaskError(errText)))
	return hex.EncodeToString(h[:8])
}

// Archived reports whether d is archived (its ArchivedAt is set).
func (d *DeadLetter) Archived() bool { return !d.ArchivedAt.IsZero() }

// replayByKey is the context key of WithReplayBy.
type replayByKey struct{}

// WithReplayBy returns ctx carrying who replays dead letters ("console",
// "api", "cli: alice@host"): a DeadLetterReplayer's BeginReplay records it
// as the replay's By. It is how an operations tool says who acted without
// changing the engine's ReplayDeadLetter.
func WithReplayBy(ctx context.Context, by string) context.Context {
	return context.WithValue(ctx, replayByKey{}, by)
}

// ReplayBy returns who WithReplayBy says replays, or "".
func ReplayBy(ctx context.Context) string {
	by, _ := ctx.Value(replayByKey{}).(string)
	return by
}

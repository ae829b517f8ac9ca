package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// FingerprintNone is the DeadLetterQuery.Fingerprint that selects the dead
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

// ArchivedFilter selects dead letters by whether they are archived, as
// DeadLetterQuery.Archived takes it.
type ArchivedFilter string

// The values of DeadLetterQuery.Archived.
const (
	// ArchivedExclude (the zero value) leaves archived dead letters out.
	ArchivedExclude ArchivedFilter = ""
	// ArchivedOnly selects only archived dead letters.
	ArchivedOnly ArchivedFilter = "only"
	// ArchivedInclude selects archived dead letters and the others.
	ArchivedInclude ArchivedFilter = "include"
)

// ParseArchivedFilter reads an ArchivedFilter: exclude (or ""), only or
// include.
func ParseArchivedFilter(s string) (ArchivedFilter, error) {
	switch a := ArchivedFilter(s); a {
	case ArchivedExclude, ArchivedOnly, ArchivedInclude:
		return a, nil
	case "exclude":
		return ArchivedExclude, nil
	}
	return "", fmt.Errorf("archived filter %.40q: want exclude, only or include", s)
}

// Selects reports whether a selects a dead letter that is archived or not.
func (a ArchivedFilter) Selects(archived bool) bool {
	switch a {
	case ArchivedOnly:
		return archived
	case ArchivedInclude:
		return true
	}
	return !archived
}

// ArchivalBound reports whether q's AsOf binds the archival state too:
// whether q selects by archival (Archived is not ArchivedInclude, or
// ArchivedBefore is set), so that a dead letter archived or restored
// after the mark is left out, as it was not counted as it is now.
func (q *DeadLetterQuery) ArchivalBound() bool {
	return q.AsOf != "" && (q.Archived != ArchivedInclude || !q.ArchivedBefore.IsZero())
}

// SelectsTriage reports whether q's Fingerprint, Archived and
// ArchivedBefore select d: what a store that filters in memory checks
// besides the other filters.
func (q *DeadLetterQuery) SelectsTriage(d *DeadLetter) bool {
	switch {
	case q.Fingerprint == FingerprintNone && d.Fingerprint != "":
		return false
	case q.Fingerprint != "" && q.Fingerprint != FingerprintNone && d.Fingerprint != q.Fingerprint:
		return false
	case !q.ArchivedBefore.IsZero():
		return d.Archived() && d.ArchivedAt.Before(q.ArchivedBefore)
	}
	return q.Archived.Selects(d.Archived())
}

// DeadLetterGroup is the dead letters that share one fingerprint and
// reason, as DeadLetterGrouper returns them.
type DeadLetterGroup struct {
	// Fingerprint is "" for the dead letters recorded before fingerprints
	// (select them with FingerprintNone).
	Fingerprint string
	Reason      string
	// SampleError is the error of the group's latest failure.
	SampleError string
	Count       int
	// FirstSeen is the earliest FirstFailedAt, LastSeen the latest
	// LastFailedAt, of the group's dead letters.
	FirstSeen time.Time
	LastSeen  time.Time
}

// DeadLetterGrouper is implemented by stores that group dead letters by
// fingerprint in the database (every bundled store). It is optional, and
// must pass storetest.Run.
type DeadLetterGrouper interface {
	// GroupDeadLetters returns the groups of the dead letters q selects
	// (q.After is ignored), largest first, then latest LastSeen first, at
	// most q.Limit of them (0: the store's default page size).
	GroupDeadLetters(ctx context.Context, q *DeadLetterQuery) ([]DeadLetterGroup, error)
}

// DeadLetterArchiver is implemented by stores that archive dead letters
// instead of deleting them (every bundled store). An archived dead letter
// keeps everything, leaves the default selection of DeadLetterQuery (see
// Archived) and can be restored. Recording it again (its message failed
// again) restores it. It is optional, and must pass storetest.Run.
type DeadLetterArchiver interface {
	// ArchiveDeadLetters archives the dead letters among p.IDs that are
	// not archived and that the mark p.AsOf selects ("" selects every
	// one), at p.At, and returns how many it archived. Missing IDs are
	// ignored. A bad mark wraps ErrBadMark.
	ArchiveDeadLetters(ctx context.Context, p *ArchiveParams) (int, error)
	// RestoreDeadLetters restores the archived dead letters among p.IDs
	// that the mark p.AsOf selects ("" selects every one) and returns how
	// many it restored (p.At is ignored). Missing IDs are ignored. A bad
	// mark wraps ErrBadMark.
	RestoreDeadLetters(ctx context.Context, p *ArchiveParams) (int, error)
}

// ArchiveParams is what ArchiveDeadLetters archives and
// RestoreDeadLetters restores.
type ArchiveParams struct {
	IDs []string
	// AsOf is a mark CountDeadLetters returned, or "" for none. It
	// selects the dead letters last recorded, and last archived or
	// restored, before it: one archived or restored since the count is
	// left as it is, so that an action acts on at most what was counted.
	AsOf string
	// At is the time of the archival; zero means now, by the store's
	// clock.
	At time.Time
}

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

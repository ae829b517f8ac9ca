package ledger

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// Kind is the kind of a dispatch event.
type Kind string

// The four kinds of dispatch events. A mission is REQUESTED, then CONFIRMED,
// then LAUNCHED; it may be CANCELLED instead from REQUESTED or CONFIRMED.
// LAUNCHED and CANCELLED close the mission; the patient's next event must be
// the REQUESTED of a new mission.
const (
	Requested Kind = "REQUESTED"
	Confirmed Kind = "CONFIRMED"
	Launched  Kind = "LAUNCHED"
	Cancelled Kind = "CANCELLED"
)

// Valid reports whether k is one of the four kinds.
func (k Kind) Valid() bool {
	switch k {
	case Requested, Confirmed, Launched, Cancelled:
		return true
	}
	return false
}

// Legal reports whether an event of kind next may follow an event of kind
// prev for the same patient; prev is "" for the patient's first event.
func Legal(prev, next Kind) bool {
	switch prev {
	case "", Launched, Cancelled:
		return next == Requested
	case Requested:
		return next == Confirmed || next == Cancelled
	case Confirmed:
		return next == Launched || next == Cancelled
	}
	return false
}

// EventID is the identity of a dispatch event: a UUID-formatted (version 8,
// RFC 9562) SHA-256 over a domain tag, the patient pseudonym, the sequence
// number and the kind, each length-prefixed. It depends on nothing else — not
// the clock, not the writer, not the payload — so every writer that sees the
// same logical event publishes it under the same message ID, and Idem's inbox
// turns a second copy into a no-op.
func EventID(patient string, seq int64, kind Kind) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range []string{"dispatch-event/v1", patient, strconv.FormatInt(seq, 10), string(kind)} {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	b := h.Sum(nil)[:16]
	b[6] = b[6]&0x0f | 0x80 // version 8
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	x := hex.EncodeToString(b)
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// MinKeyBytes is the shortest pseudonymisation key accepted.
const MinKeyBytes = 32

// ErrWeakKey is returned by NewPseudonymizer for a key shorter than
// MinKeyBytes.
var ErrWeakKey = errors.New("pseudonymisation key too short")

// Pseudonymizer turns raw patient identifiers into pseudonyms with a keyed
// HMAC-SHA256. Without the key, a pseudonym cannot be recomputed from a
// guessed identifier (a plain hash of a national id can: the id space is
// small). The key lives outside the database (flag or environment); only
// pseudonyms are ever stored or sent.
type Pseudonymizer struct {
	key []byte
}

// NewPseudonymizer returns a Pseudonymizer for key, which must hold at least
// MinKeyBytes bytes.
func NewPseudonymizer(key []byte) (*Pseudonymizer, error) {
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("%w: %d bytes, want at least %d", ErrWeakKey, len(key), MinKeyBytes)
	}
	return &Pseudonymizer{key: append([]byte(nil), key...)}, nil
}

// Pseudonym returns the pseudonym of a raw patient id: "p_" and the hex
// HMAC-SHA256 of the id in Unicode NFC with surrounding space trimmed, so
// that one patient written two ways gets one pseudonym. An empty id or one
// with control characters is refused.
func (p *Pseudonymizer) Pseudonym(rawID string) (string, error) {
	id := norm.NFC.String(strings.TrimSpace(rawID))
	if id == "" {
		return "", errors.New("empty patient id")
	}
	if strings.IndexFunc(id, unicode.IsControl) >= 0 {
		return "", errors.New("patient id has control characters")
	}
	m := hmac.New(sha256.New, p.key)
	m.Write([]byte("patient/v1\x00"))
	m.Write([]byte(id))
	return "p_" + hex.EncodeToString(m.Sum(nil)), nil
}

// ValidPseudonym reports whether s has the form Pseudonym returns. Writers
// refuse anything else as a patient key, so a raw id cannot slip into the
// ledger by mistake.
func ValidPseudonym(s string) bool {
	if len(s) != 2+2*sha256.Size || !strings.HasPrefix(s, "p_") {
		return false
	}
	_, err := hex.DecodeString(s[2:])
	return err == nil && strings.ToLower(s) == s
}

// Package ids derives deterministic message identities.
package ids

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Derive returns a UUID-formatted (version 8, RFC 9562) identity computed
// from parts with SHA-256. The same parts always give the same ID; parts are
// length-prefixed, so ("ab","c") and ("a","bc") differ.
func Derive(parts ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	b := h.Sum(sum[:0])[:16]
	b[6] = b[6]&0x0f | 0x80 // version 8
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:16])
	return string(out[:])
}

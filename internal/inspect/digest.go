package inspect

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
)

// digester hashes a selection for a batch action to bind its
// confirmation to: each field length-prefixed, so that no two selections
// hash the same fields alike.
type digester struct {
	h hash.Hash
	n [8]byte
}

func newDigester() *digester { return &digester{h: sha256.New()} }

// str adds s, length-prefixed.
func (d *digester) str(s string) {
	binary.BigEndian.PutUint64(d.n[:], uint64(len(s)))
	d.h.Write(d.n[:])
	d.h.Write([]byte(s))
}

// num adds v.
func (d *digester) num(v int64) {
	binary.BigEndian.PutUint64(d.n[:], uint64(v))
	d.h.Write(d.n[:])
}

// sum is the digest: printable ASCII, to pass back with the action.
func (d *digester) sum() string { return hex.EncodeToString(d.h.Sum(nil)[:16]) }

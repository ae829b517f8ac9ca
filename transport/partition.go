package transport

import (
	"math/bits"

	"github.com/idemhq/idem/canon"
)

// The partition rule of PartitionedConsumer, for transports to route and
// hand out by: an envelope's partition is
//
//	PartitionOf(PartitionKey(env), parts)
//
// the hashtext of its canonical correlation ID modulo the number of
// partitions. A saga key therefore lands in one partition whatever Unicode
// form it arrives in, and in the same partition number on every transport
// (and pgstore's queue) with the same partition count.

// PartitionKey returns the string whose hash chooses env's partition: the
// canonical form of env.CorrelationID (canon.Key: Unicode NFC, surrounding
// white space trimmed), so that the NFC and NFD forms of one saga key
// share a partition, and so a consumer and an order. A correlation ID that
// is not a valid key (the engine dead-letters its message) is returned as
// it is, and an envelope without one falls back to env.ID. No length limit
// applies here: the limit is the engine's to enforce. PartitionKey is pure
// and safe for concurrent use.
func PartitionKey(env *Envelope) string {
	c := env.CorrelationID
	if c == "" {
		return env.ID
	}
	// NFC can make a key up to three times longer than its raw form.
	if k, err := canon.Key(c, 3*len(c)+4); err == nil {
		return k
	}
	return c
}

// PartitionOf returns the partition, from 0 to parts-1, of the partition
// key key (PartitionKey's result): PartitionHash(key) modulo parts. parts
// < 2 means one partition, 0. PartitionOf is pure and safe for concurrent
// use.
func PartitionOf(key string, parts int) int {
	if parts < 2 {
		return 0
	}
	return int(PartitionHash(key) % uint32(parts))
}

// ShareOf returns the share, from 0 to parts-1, of the partition key key
// (PartitionKey's result) among parts replicas splitting a queue
// (SharedConsumer): the parts equal ranges of PartitionHash(key), share i
// holding the hashes from i·2³¹/parts (rounded down) up to the next
// share's first. parts < 2 means one share, 0. Ranges rather than
// PartitionOf's remainders let a database read one share through a range
// of the hash, which its planner can estimate. ShareOf is pure and safe
// for concurrent use.
func ShareOf(key string, parts int) int {
	if parts < 2 {
		return 0
	}
	h := uint64(PartitionHash(key))
	// The share i with i·2³¹/parts <= h < (i+1)·2³¹/parts, both bounds
	// rounded down as SQL's integer division rounds them.
	i := int(h * uint64(parts) >> 31)
	for i > 0 && h < uint64(i)<<31/uint64(parts) {
		i--
	}
	for i+1 < parts && h >= uint64(i+1)<<31/uint64(parts) {
		i++
	}
	return i
}

// PartitionHash returns PostgreSQL's hashtext(key) & 2147483647, the hash
// of a partition key. It is a port of PostgreSQL's hash_bytes (Bob
// Jenkins' lookup3 hash) for little-endian machines, which is what
// hashtext returns on amd64 and arm64, so that pgstore, computing it in
// SQL, and every transport agree. Use it when a transport keeps the hash
// (to take it modulo a partition count later); PartitionOf is the
// partition itself.
func PartitionHash(key string) uint32 {
	k := []byte(key)
	n := uint32(len(k))
	a := 0x9e3779b9 + n + 3923095
	b, c := a, a
	rot := bits.RotateLeft32
	mix := func() {
		a -= c
		a ^= rot(c, 4)
		c += b
		b -= a
		b ^= rot(a, 6)
		a += c
		c -= b
		c ^= rot(b, 8)
		b += a
		a -= c
		a ^= rot(c, 16)
		c += b
		b -= a
		b ^= rot(a, 19)
		a += c
		c -= b
		c ^= rot(b, 4)
		b += a
	}
	for len(k) >= 12 {
		a += uint32(k[0]) | uint32(k[1])<<8 | uint32(k[2])<<16 | uint32(k[3])<<24
		b += uint32(k[4]) | uint32(k[5])<<8 | uint32(k[6])<<16 | uint32(k[7])<<24
		c += uint32(k[8]) | uint32(k[9])<<8 | uint32(k[10])<<16 | uint32(k[11])<<24
		mix()
		k = k[12:]
	}
	// The last 0 to 11 bytes; the lowest byte of c is left for the length
	// as in hash_bytes.
	switch len(k) {
	case 11:
		c += uint32(k[10]) << 24
		fallthrough
	case 10:
		c += uint32(k[9]) << 16
		fallthrough
	case 9:
		c += uint32(k[8]) << 8
		fallthrough
	case 8:
		b += uint32(k[7]) << 24
		fallthrough
	case 7:
		b += uint32(k[6]) << 16
		fallthrough
	case 6:
		b += uint32(k[5]) << 8
		fallthrough
	case 5:
		b += uint32(k[4])
		fallthrough
	case 4:
		a += uint32(k[3]) << 24
		fallthrough
	case 3:
		a += uint32(k[2]) << 16
		fallthrough
	case 2:
		a += uint32(k[1]) << 8
		fallthrough
	case 1:
		a += uint32(k[0])
	}
	// final(a, b, c)
	c ^= b
	c -= rot(b, 14)
	a ^= c
	a -= rot(c, 11)
	b ^= a
	b -= rot(a, 25)
	c ^= b
	c -= rot(b, 16)
	a ^= c
	a -= rot(c, 4)
	b ^= a
	b -= rot(a, 14)
	c ^= b
	c -= rot(b, 24)
	return c & 0x7fffffff
}

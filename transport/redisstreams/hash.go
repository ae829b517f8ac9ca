package redisstreams

import "math/bits"

// partitionHash is PostgreSQL's hashtext(key) & 2147483647: the hash pgstore
// partitions its queue by and package rabbitmq routes by, so that a key
// falls in the same partition number with any of them (for the same
// partition count). It is a copy of package rabbitmq's port of PostgreSQL's
// hash_bytes (Bob Jenkins' lookup3 hash) for little-endian machines; the
// tests check it against PostgreSQL's values.
func partitionHash(key string) uint32 {
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

package redisstreams

import "github.com/idemhq/idem/transport"

// partitionHash is PostgreSQL's hashtext(key) & 2147483647: the hash pgstore
// partitions its queue by and package rabbitmq routes by, so that a key
// falls in the same partition number with any of them (for the same
// partition count). The tests check it against PostgreSQL's values.
func partitionHash(key string) uint32 { return transport.PartitionHash(key) }

package pgstore

import (
	"strings"
	"unicode/utf8"

	"github.com/idemhq/idem/transport"
)

// partitionKey is the text whose hashtext chooses env's queue partition:
// transport.PartitionKey, the canonical saga key, as the RabbitMQ transport
// hashes it. A correlation ID that is no valid key may hold what a text
// parameter cannot (U+0000, bytes that are not UTF-8): those are dropped,
// since such a message is dead-lettered whichever consumer takes it, and
// its partition only has to exist.
func partitionKey(env *transport.Envelope) string {
	k := transport.PartitionKey(env)
	if strings.IndexByte(k, 0) >= 0 || !utf8.ValidString(k) {
		k = strings.ToValidUTF8(strings.ReplaceAll(k, "\x00", ""), "")
	}
	return k
}

package transport

import (
	"crypto/sha256"
	"encoding/hex"
)

// HeaderRepublish marks a deliberate re-publish of a message under its own
// ID: a dead letter's replay, or a "retry now" of a message waiting out
// its backoff. Its value, a mark unique to that re-publish, tells the copy
// apart from the message's first publish and from every other re-publish.
//
// A transport that drops a message published again under an ID it has
// seen (a broker-side deduplication window, such as JetStream's
// Nats-Msg-Id) must deduplicate by PublishID, not by ID, so that the copy
// is delivered: an operator replays a dead letter minutes after its first
// publish, well within such a window. A transport without deduplication
// carries the header like any other. Either way the envelope's ID stays
// the same, so the engine's inbox, which deduplicates on the ID (or the
// IdempotencyKey), still applies the message at most once.
//
// The engine sets the header; a producer outside Idem that publishes a
// message again on purpose may set it too, with a new mark each time.
// Publishing one envelope twice with the same mark is an ordinary
// duplicate, which such a transport drops.
const HeaderRepublish = "idem-republish"

// PublishID returns the identity under which a transport that deduplicates
// publishes must recognise env: its ID, or, for a deliberate re-publish
// (HeaderRepublish set, not empty), its ID followed by " republish " and a
// digest of the mark (32 hexadecimal digits, whatever the mark holds, so
// that the identity is printable and its length bounded beside the ID's).
// Envelopes of one ID thus share a PublishID only when they carry the same
// mark, or none. transporttest checks the behaviour with
// Features.PublishDedup.
func PublishID(env *Envelope) string {
	mark := env.Headers[HeaderRepublish]
	if mark == "" {
		return env.ID
	}
	sum := sha256.Sum256([]byte(mark))
	return env.ID + " republish " + hex.EncodeToString(sum[:16])
}

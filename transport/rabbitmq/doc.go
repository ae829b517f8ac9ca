// Package rabbitmq is a transport.Transport on RabbitMQ (3.10 or later),
// built on github.com/rabbitmq/amqp091-go.
//
// # Topology
//
// For a Config.Namespace ns and Config.Partitions n, Open declares:
//
//   - exchange ns (topic): Publish routes every envelope to partition
//     PostgreSQL-hashtext(key) mod n, with routing key p<i>, where key is
//     the canonical CorrelationID (Unicode NFC, trimmed; the ID without
//     one), the hash pgstore partitions its queue by: the NFC and NFD forms
//     of a saga key share a partition queue, and so an order;
//   - queues ns.p0 … ns.p<n-1>: durable quorum queues with single active
//     consumer (x-single-active-consumer), so one process consumes a
//     partition at a time and the messages of one key stay in order, and
//     at-least-once dead-lettering to ns.dlx;
//   - exchange ns.dlx (fanout) and queue ns.dead: messages that are not
//     Idem envelopes, and any a broker policy dead-letters (a delivery
//     limit, for example), wait there for an operator;
//   - exchange ns.delay (topic) and, on first use, queues ns.delay.<ms>:
//     one per delay bucket, with a queue-wide TTL that dead-letters back to
//     ns, for Nack with a delay.
//
// # Messages
//
// The AMQP body is the JSON-encoded transport.Envelope, so every field
// (headers with empty values, SentAt to the nanosecond, the idempotency
// key) survives exactly; the properties repeat the id (message_id), type
// and correlation id for tools, and the content type is
// application/vnd.idem.envelope+json. Messages are persistent and
// published with the mandatory flag and publisher confirms: Publish returns
// only when the broker has confirmed every message, and an error when one
// was nacked or could not be routed.
//
// # Message size
//
// RabbitMQ closes the channel of a message over its max_message_size,
// which a client cannot read; Config.MaxMessageSize (default 16 MiB,
// RabbitMQ 4's default) tells the transport. Publish refuses, before
// sending anything of the batch, an envelope whose Body exceeds
// MaxMessageBytes (the base64 JSON encoding of a Body takes 4/3 of its
// size, and EnvelopeReserve is kept for the other fields) or whose
// encoding exceeds Config.MaxMessageSize, with an error wrapping
// transport.ErrTooLarge, so that the engine's outbox relay sets it aside
// instead of losing the connection on it again and again.
//
// # Settling, leases and fencing
//
// Acks are manual; the engine acks after its unit of work commits. A
// delivery's Token names its connection, channel and delivery tag. RabbitMQ
// redelivers an unacknowledged message only when its channel closes, so the
// transport keeps a client-side lease: a delivery unsettled for
// Config.Lease is requeued by the transport itself (basic.nack with
// requeue), and its late Ack or Nack returns transport.ErrLeaseLost instead
// of touching the redelivery. A lost connection fences every delivery it
// carried the same way. ExtendLeases (transport.LeaseExtender) restarts
// that client-side lease; the engine does so every third of Config.Lease
// for a batch still running. The broker's consumer_timeout still bounds
// how long a delivery may stay unacknowledged. Attempt is 1 plus the quorum queue's
// x-delivery-count (plus the attempts before a delayed re-publish).
//
// # Delays
//
// RabbitMQ has no per-message delay without a plugin, and a per-message TTL
// expires only at the head of a queue. Nack with a delay therefore publishes
// a copy (same id, attempts so far, not-before time) to the delay queue of
// the smallest bucket (100ms, 200ms, 500ms, 1s, … 1h) not shorter than the
// delay, waits for its confirm, and acks the original. Within a bucket every
// message has the same TTL, so they expire in order. A copy that comes back
// before its not-before time (a delay over an hour, or clock skew) is
// delayed again. A copy and its original can both survive a crash between
// the two steps; the engine's inbox recognises the duplicate by its id.
//
// # Connections
//
// Open fails fast with advice (unreachable broker, refused credentials or
// virtual host, missing permissions, queues declared with other settings,
// fewer partitions than the queues that exist). Afterwards a lost
// connection is re-established with exponential backoff and jitter;
// Publish waits for it (until its context ends) and sends the batch again
// with the same ids, and Receive resumes when the consumers are back.
// Consumers are registered by the first Receive, so a process that only
// publishes never holds a partition.
package rabbitmq

// Package natsjs is a transport.Transport on NATS JetStream, built on the
// jetstream package of nats.go.
//
// # Layout on the broker
//
// One stream per Idem namespace (Config.Stream, default "IDEM") holds every
// message. An envelope is published on the subject
//
//	<Stream>.<partition>.<type>
//
// where partition is PostgreSQL's hashtext of the envelope's canonical
// CorrelationID (Unicode NFC, trimmed; its ID when it has none) modulo
// Config.Partitions, the hash pgstore and rabbitmq partition by, so the NFC
// and NFD forms of a saga key share a subject; type is the envelope's Type with
// every character outside [A-Za-z0-9_-] replaced by '_'. The stream uses
// work-queue retention, so a message leaves the stream once acknowledged,
// and file storage. Each partition p has its own durable pull consumer,
// "<Consumer>-p<p>" (Config.Consumer, default "idem"), filtered on the
// subjects "<Stream>.<p>.*" (or one subject per Config.Types), with
// explicit acks, Config.AckWait as its visibility timeout, no delivery
// limit (MaxDeliver -1) and Config.MaxAckPending; the consumers are shared
// by every Transport of the namespace, in one process or many. Open
// deletes the single consumer named Config.Consumer that earlier versions
// used for every subject (a work-queue stream refuses overlapping
// consumers; the messages stay in the stream for the partition consumers),
// and refuses a Config.Partitions smaller than the partition consumers
// that exist, whose subjects would otherwise never be delivered.
//
// # Partitions
//
// Receive pulls from every partition's consumer in turn.
// ReceivePartition(part, parts), which the engine's consumers call with
// Config.PartitionedReceive, pulls only from the consumers of the
// partitions p with p mod parts = part, so within one Transport a saga key
// is handed to one of the engine's consumers only, in the order of the
// stream. When parts divides Config.Partitions (the default 16 and 4
// consumers, say) that is the part its hash names, as pgstore and rabbitmq
// partition; when it does not, every key still goes to exactly one part,
// only not the one its hash names, and with parts above Config.Partitions
// the parts from Config.Partitions on receive nothing. Choose
// Config.Partitions as a multiple of the engine's Config.Consumers.
//
// What is not guaranteed: order across replicas. Replicas with the same
// configuration pull from the same partition consumers, and JetStream
// spreads a consumer's messages over every pull request waiting on it, so
// one key's messages can be in batches of two replicas at once and be
// applied out of stream order; the engine's inbox still applies each
// message once, and concurrent units of work on one key conflict and
// retry. (RabbitMQ's single active consumer keeps a partition with one
// process; JetStream's pinned-client priority groups would be the
// equivalent and are not used yet.) A redelivery (a Nack, an expired
// AckWait) can also be overtaken by later messages of its key, as on any
// JetStream consumer. Within one replica, a Receive that pulls waits on
// one pull request per partition, and a no-wait pull skips a partition
// while such a request is out, so that a message it brings is not
// overtaken.
//
// # Guarantees
//
// Publish sets the Nats-Msg-Id header to the envelope ID, so the stream's
// duplicate window (Config.DuplicateWindow) drops a re-sent outbox row,
// except on a deliberate re-publish (a dead letter's replay, a "retry
// now"), whose Nats-Msg-Id adds a digest of its mark
// (transport.PublishID), so that the window does not drop it; and it
// returns once JetStream acknowledged every envelope (the PubAck, which a
// server configured with sync_interval: always gives after fsync).
// A call of 8 envelopes or more goes as atomic batches of up to 1,000
// (nats-server 2.12 and later, on a stream with allow_atomic, which Open
// sets on a stream it creates), which the server stores with a fixed
// handful of syncs each instead of one per message; a batch the server
// refuses (an ID already in the duplicate window, say) stores nothing,
// and Publish sends its envelopes again one at a time. A slow server that
// fills nats.go's window of unanswered asynchronous publishes (4,000, which
// every goroutine of a Transport shares) makes Publish wait for answers
// and send again, bounded by its ctx and Close, rather than fail. The engine
// acknowledges deliveries after its unit of work committed; Nack with a
// delay is NakWithDelay. Delivery.Attempt is the message's
// NumDelivered; the engine dead-letters by it, which is why the consumer has
// no MaxDeliver and the package installs no max-deliveries advisory
// listener.
//
// # Fencing
//
// JetStream does not fence acknowledgements: the server settles a message
// by stream sequence and ignores the delivery count in the ack subject, so
// a late Ack from a consumer whose AckWait expired settles the redelivery
// another consumer holds (nats-server issues 4786 and 6937). The package
// fences on the client: Delivery.Token is "<stream sequence>.<delivery
// count>", and Ack and Nack return transport.ErrLeaseLost, without sending
// anything to the server, when this Transport has since handed out the same
// message again, or when the delivery's lease is no longer safely alive: the
// lease starts when the pull request that brought the message was sent
// (the server cannot deliver earlier), and an ack is sent only before
// 90% of AckWait has elapsed. What remains is an ack sent in time that the
// network holds for longer than the remaining 10% of AckWait; such an ack
// settles a message whose unit of work committed (the engine acknowledges
// only after commit), so the newer delivery it settles would have been a
// duplicate that the inbox skips. Exactly-once effects rest on the engine's
// inbox, not on this fence.
//
// The lease clock is Config.AckWait, so every Transport of a consumer must
// use the consumer's AckWait: Open creates a missing consumer with it and
// refuses, without changing the consumer, a Transport whose Config.AckWait
// differs from an existing consumer's. ExtendLeases
// (transport.LeaseExtender) sends an in-progress acknowledgement
// (Msg.InProgress), which starts the server's AckWait again, and moves the
// client-side fence with it; the engine sends one every third of AckWait
// for the deliveries of a batch still running, so a handler slower than
// AckWait keeps its batch. To change AckWait, stop every
// process of the consumer, edit the consumer, and start them with the new
// value.
//
// # Message size
//
// A NATS message, headers included, may not exceed the server's
// max_payload (1 MiB by default) or the stream's max_msg_size. Open reads
// both; MaxMessageBytes is the smaller minus HeaderReserve (8 KiB) for the
// headers, and Publish refuses, before sending anything of the batch, an
// envelope whose Body is longer or whose metadata does not fit beside its
// Body, with an error wrapping ErrTooLarge. The engine's
// Config.MaxBodyBytes must not exceed MaxMessageBytes. The embedded
// server's max_payload is 8 MiB (natsembed.Config.MaxPayload).
//
// # Close
//
// Messages that pull requests abandoned by Receive brought after it gave
// up are held for the next Receive, which hands out those whose lease is
// alive; one with less than half of AckWait left is first extended
// (in-progress acknowledgement), so that the engine's first renewal, a
// third of AckWait later, comes in time. Close returns them with a Nak while
// their lease is alive, so they are redelivered at once instead of after
// AckWait (the redelivery counts as an attempt, as it would after
// AckWait). Deliveries handed out and not settled are left to AckWait.
//
// # Running the server
//
// Package natsembed (a package of its own, so that a program connecting
// to an external server does not compile nats-server) starts nats-server
// in-process with JetStream file storage under a directory and fsync
// before every acknowledgement (SyncAlways), for a single binary. Open connects to any server or cluster by URL
// ("nats://a:4222,nats://b:4222"). Open refuses a stream whose settings
// would lose messages: memory storage (unless Config.AllowMemoryStorage) or
// fewer replicas than Config.Replicas. The fsync setting of an external
// server cannot be read by a client; run it with sync_interval: always.
package natsjs

// Package redisstreams is a transport.Transport on Redis Streams (Redis 7.0
// or later), built on github.com/redis/go-redis/v9: the most used Go client
// for Redis, and the one the project's standards list.
//
// # Keys
//
// For a Config.Namespace ns and Config.Partitions n, the transport uses:
//
//   - streams {ns}:p0 … {ns}:p<n-1>: Publish adds an envelope to stream
//     transport.PartitionHash(transport.PartitionKey(env)) mod n (PostgreSQL's hashtext),
//     the hash pgstore partitions its queue by and package rabbitmq routes
//     by, so the messages of one saga key share a stream;
//   - one consumer group, "idem", on every stream, shared by every
//     Transport of the namespace in every process; each Transport is one
//     consumer with a name of its own (host, pid and random bytes), so a
//     restarted process never shares a name with its predecessor;
//   - sorted sets {ns}:p<i>:delay: the entries of a Nack waiting for their
//     delay to pass;
//   - a stream {ns}:wake of at most one entry, which Nack writes to wake
//     blocked receivers, and a hash {ns}:meta that records n: Open refuses
//     another partition count, so a replica or a tool (idem dlq replay)
//     configured otherwise cannot publish into streams nobody reads.
//
// Every key starts with the hash tag {ns}, so that a namespace lives in one
// Redis Cluster slot; the transport itself talks to one standalone server
// and refuses a cluster node.
//
// # Messages
//
// XADD writes three fields: id (the envelope ID), meta (every other field
// of the envelope but the body, as JSON, SentAt to the nanosecond) and body
// (the body's bytes as they are). Publish pipelines the XADDs of a batch
// and returns once the server answered each, which on a server with
// appendfsync always comes after the write was fsynced. Redis 7 has no
// deduplication window: an envelope published twice (an outbox row the
// relay sends again) is delivered twice, and the engine's inbox skips the
// copy. MaxMessageBytes (transport.SizeLimiter) is Config.MaxMessageBytes
// (8 MiB), lowered to fit the server's proto-max-bulk-len.
//
// An entry that is not such an envelope (another program's XADD, or a meta
// field that does not decode to an id and a type) is handed out with what
// it has: its id field (or "redis:<stream>:<entry id>"), no type, and its
// fields as a JSON object for a body. The engine dead-letters it as an
// unknown type and acknowledges it, as it does for natsjs and the SQL
// queues: it is never retried forever and never dropped silently.
//
// # Receiving and settling
//
// Receive runs one Lua script over the partitions it reads, which hands out
// at most max entries in this order: delayed entries that fell due, entries
// whose lease expired (XAUTOCLAIM, run on a partition every Lease/8 or
// Config.PollInterval, whichever is shorter),
// and new entries (XREADGROUP >). With nothing to hand out it blocks in
// XREAD on the partitions' streams (from the group's last delivered id) and
// the wake stream, for at most the time until the next delayed entry is due
// or Config.PollInterval; that XREAD claims nothing, so a Receive that gives
// up while it waits loses no message. ReceivePartition(part, parts) reads
// the streams i with i ≡ part (mod gcd(n, parts)); when parts divides n
// these hold exactly its keys, otherwise what it reads for another part is
// kept for that part's next call in this process.
//
// Delivery.Attempt is the entry's delivery counter in the group's pending
// entries list (PEL): 1 when first read, raised by one by every XAUTOCLAIM,
// and restored plus one when a delayed entry comes back. Delivery.Token is
// "<partition>/<entry id>/<delivery counter>/<consumer>".
//
// The engine acknowledges after its unit of work committed. Ack runs a
// script that, for each delivery, reads the entry's PEL record (XPENDING)
// and, only if it still names the token's consumer and delivery counter,
// runs XACK and XDEL: the check and the change are one atomic step.
//
// # Leases and fencing
//
// An entry stays in the PEL of the consumer that read it. Once it has been
// idle for Config.Lease (by the server's clock: the PEL's delivery time),
// the next Receive of any consumer reclaims it with XAUTOCLAIM, which makes
// that consumer the owner and raises the delivery counter. The first
// holder's late Ack or Nack then finds another owner or counter and returns
// an error wrapping transport.ErrLeaseLost, leaving the newer delivery
// untouched. A late settlement before anyone reclaimed the entry finds its
// own record and is accepted. Because the PEL is persistent, a delivery
// held across a server restart keeps its lease and can still be acked.
// ExtendLeases (transport.LeaseExtender) renews a lease by claiming the
// entry again for its holder (XCLAIM with a min-idle of 0 and JUSTID),
// which resets its idle time without raising its counter, in one script
// that first checks owner and counter as a settlement does; the engine
// renews the leases of a batch still running every third of Config.Lease.
//
// # Delays
//
// Nack(d, delay) runs one script that checks the PEL record as Ack does,
// removes it (XACK, the entry stays in its stream) and adds "<entry id>
// <delivery counter>" to its partition's delay set with the score server
// time + delay (rounded up to the millisecond). When the score has passed,
// the receive script removes it from the set and claims the entry back
// (XCLAIM FORCE RETRYCOUNT counter+1). The delay is thus measured by the
// server's clock and never ends early by it, and a delayed entry never
// blocks the entries behind it: it is not at any stream's head. A Nack
// without delay is the same with delay 0. Nack also writes to the wake
// stream, so a Receive blocked in another process looks again (at once,
// then waits until the delay is due).
//
// # Trimming
//
// The streams are never trimmed by MAXLEN or MINID. In Redis 7, trimming
// does not consult the consumer group: it would delete entries that are
// pending (handed out, not yet acknowledged) or delayed, and a pending
// entry that no longer exists is dropped from the PEL by the next
// XAUTOCLAIM, so the message would be lost. Instead Ack deletes what it
// acknowledges (XACK and XDEL in one script), so a stream holds exactly its
// unread, pending and delayed entries; Pending (transport.PendingCounter)
// counts ready as stream length less pending entries, and unacked as the
// pending entries of every consumer, in one atomic snapshot. XDEL frees a
// stream node's memory when every entry in it is deleted, so a node with a
// long-delayed or long-held entry keeps its few kilobytes until then. The
// wake stream, which carries no messages, is capped at one entry.
//
// # Server requirements
//
// Open refuses, with an error that says what to change:
//
//   - a URL without a password for a server that is neither on a loopback
//     address nor a Unix socket, before connecting: anyone who can reach
//     it could read, change or delete the messages (Config.AllowUnauthenticated
//     accepts it);
//   - a server without appendonly yes and appendfsync always, or whose
//     appendfsync cannot be read (CONFIG GET refused): a crash could lose
//     messages Publish reported stored and undo acknowledgements, which
//     would also undo the fencing below (Config.AllowLossOnCrash accepts
//     it, and says that acknowledged messages may be lost);
//   - a maxmemory-policy of allkeys-*, which may evict a whole stream under
//     memory pressure (Config.AllowEviction accepts it; volatile-* policies
//     and noeviction are safe, the transport's keys have no TTL);
//   - Redis before 7.0, a Redis Cluster node, a replica, an unreachable
//     server, refused credentials.
//
// # Connections and restarts
//
// go-redis keeps a pool of connections and dials again after a lost one.
// While the server cannot be reached (a restart, LOADING while it replays
// its append-only file, a failover), Publish, Receive and Pending wait for
// it with exponential backoff (Config.ReconnectMin, ReconnectMax) until
// their context ends, and Ack and Nack for up to Config.Lease; Publish then
// adds again the entries the server had not confirmed, with the same IDs.
// The Lua scripts are loaded again by EVAL after a restart emptied the
// script cache. A stream or group found missing (the server lost its data,
// or the namespace was deleted) is created again.
//
// Consumer names are never reused, so the group's consumer list would grow
// with every restart: every 10 minutes, a consuming Transport deletes the
// consumers that hold no pending entry and were idle for an hour (or ten
// leases), checked and deleted in one script, since XGROUP DELCONSUMER
// would drop a consumer's pending entries; Close deletes its own consumer
// when it holds nothing.
//
// # Gaps
//
// What the transport cannot guarantee, by design of Redis:
//
//   - Lost writes undo the fence. The fence is the PEL record's owner and
//     delivery counter. If the server loses writes (appendfsync everysec
//     or no, accepted with Config.AllowLossOnCrash; or a failover to an
//     asynchronous replica that lacks the latest writes, which Redis
//     replication allows and Sentinel does not prevent), an entry can be
//     read again by the same consumer with a delivery counter an older,
//     still unsettled delivery carries, and that older delivery's Ack
//     would settle the newer one. Published messages and acknowledgements
//     can be lost or undone the same way; the engine's inbox still
//     applies each message at most once, but a lost publish is lost.
//   - A late Ack or Nack after the newer delivery was itself settled finds
//     no PEL record and returns nil: there is nothing left to protect, but
//     the caller is not told that its lease was lost.
//   - Leases and delays are measured by the server's clock: a jump forward
//     expires leases early (extra deliveries, fenced) and ends delays early
//     by the wall clock.
//   - XAUTOCLAIM examines at most ten times the batch size of PEL entries
//     per call, resuming from a cursor, so an expired entry behind many
//     live ones is reclaimed after several passes rather than at the first.
//   - A receive script whose reply is lost (the connection dies after the
//     server ran it) leaves the entries it claimed with this consumer, and
//     they are handed out again only after their lease.
//   - A delayed entry comes back only through a Receive that reads its
//     partition: with no such consumer running, it waits (as a new message
//     would).
//   - Delivery.Attempt counts hand-outs, including those after an expired
//     lease, as the transport contract says.
package redisstreams

// Package kafka is a transport.Transport on Apache Kafka, through
// franz-go (github.com/twmb/franz-go/pkg/kgo). It is a module of its own
// (github.com/idemhq/idem/transport/kafka), so that franz-go stays out of
// the module graph of programs that do not use it.
//
// One topic carries an application's messages and one consumer group
// consumes it. Publish sends each envelope to the partition of its saga
// key, PartitionOf(PartitionKey(env), Config.Partitions), the rule every
// Idem transport and pgstore's queue follow, so per-key order holds
// within a partition. The producer is idempotent with acks from every
// in-sync replica.
//
// Kafka has no per-message acknowledgement or visibility timeout: a
// consumer group commits one offset per partition. The transport keeps
// leases, delays and attempts in the consuming process, over a buffer of
// fetched records, and commits, per partition, only the offset after the
// longest prefix of acknowledged records: a committed offset never passes
// an unsettled record. On a rebalance, a member stops handing out the
// records of the partitions it gives up, waits (up to a lease) for the
// deliveries in flight, commits the acknowledged prefix, and only then
// lets the partitions go; the new owner hands out again everything after
// the committed offset, and the engine's inbox drops what was applied.
// docs/transport-kafka.md sets these guarantees against Watermill's Kafka
// pub/sub and MassTransit's riders.
//
// The package's tests run the conformance suite against franz-go's
// in-process kfake cluster, which stands in for a real one, and against a
// real broker when IDEM_TEST_KAFKA_URL is set.
package kafka

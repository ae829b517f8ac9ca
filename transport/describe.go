package transport

// Describer is implemented by transports that say, for telemetry, which
// messaging system carries their messages. The engine asks once, when it
// is created, and hands the Description to its tracer (OpenTelemetry's
// messaging.* attributes). A transport that does not implement it is
// described as messaging system "idem".
type Describer interface {
	// Describe returns the transport's description. It does no I/O and
	// must be safe for concurrent use.
	Describe() Description
}

// Description names a transport's messaging system, destination and
// consumer group, in the terms of OpenTelemetry's messaging semantic
// conventions. The zero value describes nothing.
type Description struct {
	// System is the messaging system: "postgresql", "sqlite", "nats",
	// "rabbitmq", "redis".
	System string
	// Destination is where Publish sends and Receive takes messages: the
	// queue table, the stream, the exchange. Low cardinality: never a
	// per-message subject or partition.
	Destination string
	// ConsumerGroup is the name of the durable consumer or consumer group
	// that the transport receives as, when the system has one; "" when it
	// has none (the SQL queues).
	ConsumerGroup string
}

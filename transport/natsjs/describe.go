package natsjs

import "github.com/idemhq/idem/transport"

var _ transport.Describer = (*Transport)(nil)

// Describe implements transport.Describer: system "nats", the stream as
// destination, and Config.Consumer (which starts the names of the
// partitions' durable consumers) as consumer group.
func (t *Transport) Describe() transport.Description {
	return transport.Description{System: "nats", Destination: t.cfg.Stream, ConsumerGroup: t.cfg.Consumer}
}

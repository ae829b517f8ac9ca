package rabbitmq

import "github.com/idemhq/idem/transport"

var _ transport.Describer = (*Transport)(nil)

// Describe implements transport.Describer: system "rabbitmq" and the
// namespace's exchange (Config.Namespace) as destination. The partition
// queues have one active consumer each, which is no consumer group.
func (t *Transport) Describe() transport.Description {
	return transport.Description{System: "rabbitmq", Destination: t.exchange()}
}

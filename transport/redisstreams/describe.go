package redisstreams

import "github.com/idemhq/idem/transport"

var _ transport.Describer = (*Transport)(nil)

// Describe implements transport.Describer: system "redis", the namespace
// (Config.Namespace, which starts the name of every stream) as
// destination, and the consumer group every Transport of a namespace reads
// as.
func (t *Transport) Describe() transport.Description {
	return transport.Description{System: "redis", Destination: t.cfg.Namespace, ConsumerGroup: group}
}

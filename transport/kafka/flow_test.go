package kafka_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Flow control beside Kafka (kfake standing in), admitted through
// PostgreSQL: each case on a fresh schema and a fresh topic
// (enginetest.FlowBroker).
func TestEngineFlowControlBesideKfake(t *testing.T) {
	url := kfakeURL(t)
	enginetest.FlowBroker(t, func(t *testing.T) (store.Store, func() transport.Transport) {
		st, _ := openPG(t)
		topic := topicFor(t)
		return st, func() transport.Transport {
			return open(t, url, testConfig(topic, time.Second))
		}
	})
}

// A message slower than the Lease: its engine keeps the batch's leases
// alive (ExtendLeases), so the batch is not handed out again and the slow
// message runs once. The two engines are members of one group.
func TestSlowBatchKeepsItsLeaseOnKfake(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	url := kfakeURL(t)
	st, _ := openPG(t)
	topic := topicFor(t)
	var trs [2]transport.Transport
	for i := range trs {
		trs[i] = open(t, url, testConfig(topic, lease))
	}
	enginetest.SlowBatch(t, enginetest.SlowCase{Stores: [2]store.Store{st, st}, Transports: trs, Lease: lease})
}

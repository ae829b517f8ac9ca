package rabbitmq_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/rabbitmq"
)

// Flow control beside RabbitMQ, admitted through PostgreSQL: each case
// on a fresh schema and a fresh namespace (enginetest.FlowBroker).
func TestEngineFlowControlBesideRabbitMQ(t *testing.T) {
	testenv.AMQPURL(t)
	enginetest.FlowBroker(t, func(t *testing.T) (store.Store, func() transport.Transport) {
		st := openStore(t)
		ns := namespace(t, 2)
		return st, func() transport.Transport {
			return open(t, rabbitmq.Config{Namespace: ns, Partitions: 2, Lease: time.Second})
		}
	})
}

package redisstreams_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/redisstreams"
)

// Flow control beside Redis Streams, admitted through PostgreSQL: each
// case on a fresh schema and a fresh namespace (enginetest.FlowBroker).
func TestEngineFlowControlBesideRedisStreams(t *testing.T) {
	testenv.RedisURL(t)
	enginetest.FlowBroker(t, func(t *testing.T) (store.Store, func() transport.Transport) {
		st, _ := openPG(t)
		ns := namespace(t)
		return st, func() transport.Transport {
			return open(t, redisstreams.Config{Namespace: ns, Partitions: 2, Lease: time.Second})
		}
	})
}

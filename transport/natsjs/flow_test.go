package natsjs_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
)

// Flow control beside JetStream, admitted through PostgreSQL: each case
// on a fresh schema and a fresh stream (enginetest.FlowBroker).
func TestEngineFlowControlBesideJetStream(t *testing.T) {
	enginetest.FlowBroker(t, func(t *testing.T) (store.Store, func() transport.Transport) {
		st, _ := openPG(t)
		stream := randName("F_")
		return st, func() transport.Transport {
			return open(t, natsjs.Config{Stream: stream, AckWait: time.Second})
		}
	})
}

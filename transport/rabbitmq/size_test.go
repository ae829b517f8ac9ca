package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/rabbitmq"
)

// The broker closes the channel of a message over its max_message_size
// (and so fences every delivery of the connection), so Publish refuses
// one itself: a Body over MaxMessageBytes, and an envelope whose other
// fields make its encoding exceed Config.MaxMessageSize. Nothing of the
// batch is sent, and the transport keeps working.
func TestPublishRefusesTooLargeMessages(t *testing.T) {
	const size = 128 << 10
	tr := open(t, rabbitmq.Config{Namespace: namespace(t, 1), Partitions: 1, MaxMessageSize: size})
	if got, want := tr.MaxMessageBytes(), (size-rabbitmq.EnvelopeReserve)/4*3; got != want {
		t.Fatalf("MaxMessageBytes = %d, want (MaxMessageSize - EnvelopeReserve) × 3/4 = %d", got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	small := transport.Envelope{ID: "small", Type: "T", Body: []byte(`{}`)}
	bigBody := transport.Envelope{ID: "big-body", Type: "T", Body: make([]byte, tr.MaxMessageBytes()+1)}
	bigHeaders := transport.Envelope{ID: "big-headers", Type: "T", Body: []byte(`{}`), Headers: map[string]string{"x": strings.Repeat("h", size)}}
	for _, big := range []transport.Envelope{bigBody, bigHeaders} {
		err := tr.Publish(ctx, []transport.Envelope{small, big})
		if !errors.Is(err, transport.ErrTooLarge) || !strings.Contains(err.Error(), "MaxMessageSize") {
			t.Errorf("Publish of %s: got %v, want ErrTooLarge naming Config.MaxMessageSize", big.ID, err)
		}
	}
	// Nothing was sent: the one queue is first in, first out, so the
	// message published after the refusals is the first one there. (The
	// broker's counts lag a confirm, so Pending read at once could miss a
	// message that was sent.)
	after := transport.Envelope{ID: "after", Type: "T", Body: []byte(`{}`)}
	if err := tr.Publish(ctx, []transport.Envelope{after}); err != nil {
		t.Fatalf("Publish after the refusals: %v", err)
	}
	ds, err := tr.Receive(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Envelope.ID != "after" {
		t.Fatalf("after refused batches: received %s first, want nothing of them sent", ds[0].Envelope.ID)
	}
	if err := tr.Ack(ctx, ds); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesBadMaxMessageSize(t *testing.T) {
	for _, size := range []int{-1, rabbitmq.EnvelopeReserve, 513 << 20} {
		_, err := rabbitmq.Open(t.Context(), testenv.AMQPURL(t), &rabbitmq.Config{MaxMessageSize: size})
		if err == nil || !strings.Contains(err.Error(), "Config.MaxMessageSize") {
			t.Errorf("Open with MaxMessageSize %d: got %v, want an error naming Config.MaxMessageSize", size, err)
		}
	}
}

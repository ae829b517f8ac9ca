package rabbitmq_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/rabbitmq"
)

// Close must not return while a goroutine of the transport may still start:
// the consumers that the first Receive starts included. Before the fix,
// Receive registered them in its caller's goroutine, which raced Close's
// wait for the transport's goroutines (the race detector flagged sync.Once
// in Receive against Close) and could leave a consumer running after Close
// returned.
func TestCloseWaitsForConsumersBeingStarted(t *testing.T) {
	tr := open(t, rabbitmq.Config{Namespace: namespace(t, 1), Partitions: 1})
	reached, release := make(chan struct{}), make(chan struct{})
	rabbitmq.SetConsumeHook(tr, func(part int) {
		close(reached)
		<-release
	})
	received := make(chan error, 1)
	go func() {
		_, err := tr.Receive(t.Context(), 1)
		received <- err
	}()
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatal("Receive did not start a consumer within 10s")
	}

	closed := make(chan struct{})
	go func() {
		_ = tr.Close()
		close(closed)
	}()
	// Close must wait while the consumer is being started. 500ms is how
	// long it has to show that it does not.
	select {
	case <-closed:
		close(release)
		t.Fatal("Close returned while the transport was still starting a consumer")
	case <-time.After(500 * time.Millisecond):
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s once the consumer was started")
	}
	select {
	case err := <-received:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Receive during Close: got %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Receive still blocked 10s after Close returned")
	}
}

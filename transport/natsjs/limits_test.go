package natsjs_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
	"github.com/idemhq/idem/transport/natsjs/natsembed"
)

// An envelope with the metadata the engine gives an emitted message.
func engineLike(id string, body []byte) transport.Envelope {
	key := strings.Repeat("k", 256) // the engine's default MaxKeyLen
	return transport.Envelope{
		ID: id, Type: "orders.PaymentRequested", CorrelationID: key, CausationID: "cause-" + id,
		Headers: map[string]string{
			transport.HeaderSagaType:    "orders.Order",
			transport.HeaderSagaKey:     key,
			transport.HeaderTraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		},
		SentAt: time.Now(), Body: body,
	}
}

// The engine's default MaxBodyBytes (1 MiB) equals a NATS server's default
// max_payload, and the headers come on top: Publish must refuse such a
// body up front, naming the limit and what to change, with ErrTooLarge,
// and MaxMessageBytes must tell the largest body it accepts.
func TestPublishRefusesBodyAboveMaxMessageBytes(t *testing.T) {
	const maxPayload = 64 << 10
	srv, err := natsembed.Start(t.Context(), t.TempDir(), &natsembed.Config{MaxPayload: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	tr, err := natsjs.Open(t.Context(), srv.URL(), &natsjs.Config{Stream: randName("SIZE_")})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	limit := tr.MaxMessageBytes()
	if want := maxPayload - natsjs.HeaderReserve; limit != want {
		t.Fatalf("MaxMessageBytes: got %d, want max_payload %d - HeaderReserve %d = %d", limit, maxPayload, natsjs.HeaderReserve, want)
	}

	// A body just under max_payload: the headers make it too large for
	// NATS. So does one byte over MaxMessageBytes, even with little
	// metadata.
	for _, n := range []int{maxPayload - 100, limit + 1} {
		env := transport.Envelope{ID: "big-" + strconv.Itoa(n), Type: "T", SentAt: time.Now(), Body: bytes.Repeat([]byte("x"), n)}
		err := tr.Publish(ctx, []transport.Envelope{env})
		if !errors.Is(err, natsjs.ErrTooLarge) {
			t.Fatalf("Publish of a %d-byte body: got %v, want ErrTooLarge", n, err)
		}
		for _, want := range []string{"max_payload", "Config.MaxBodyBytes", strconv.Itoa(limit)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
	}

	// A body of exactly MaxMessageBytes with engine-like metadata goes
	// through unchanged.
	body := bytes.Repeat([]byte("y"), limit)
	if err := tr.Publish(ctx, []transport.Envelope{engineLike("fits", body)}); err != nil {
		t.Fatalf("Publish of a body of MaxMessageBytes: %v", err)
	}
	ds, err := tr.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Envelope.ID != "fits" || !bytes.Equal(ds[0].Envelope.Body, body) {
		t.Fatalf("received %s with %d bytes, want fits with %d", ds[0].Envelope.ID, len(ds[0].Envelope.Body), len(body))
	}
	if err := tr.Ack(ctx, ds); err != nil {
		t.Fatal(err)
	}

	// Metadata that does not fit beside the body is refused too.
	huge := engineLike("huge-headers", body)
	huge.Headers["x-big"] = strings.Repeat("h", natsjs.HeaderReserve)
	if err := tr.Publish(ctx, []transport.Envelope{huge}); !errors.Is(err, natsjs.ErrTooLarge) || !strings.Contains(err.Error(), "headers") {
		t.Fatalf("Publish with %d bytes of headers: got %v, want ErrTooLarge naming the headers", natsjs.HeaderReserve, err)
	}

	// The refusal comes before anything of the batch is sent.
	small := engineLike("small", []byte("{}"))
	big := engineLike("too-big", bytes.Repeat([]byte("z"), limit+1))
	if err := tr.Publish(ctx, []transport.Envelope{small, big}); !errors.Is(err, natsjs.ErrTooLarge) {
		t.Fatalf("Publish of a batch with an oversize envelope: got %v, want ErrTooLarge", err)
	}
	// The stream's sequence counts every message stored, exactly; Pending
	// would lag the publishes, and the ack of "fits" too.
	if st, err := tr.StreamState(ctx); err != nil || st.LastSeq != 1 {
		t.Fatalf("after refused batches: the stream's last sequence is %d (err %v), want 1: only %q published", st.LastSeq, err, "fits")
	}
	waitPending(t, tr, 0, 0)
}

// The embedded server's default max_payload leaves room for the engine's
// default 1 MiB bodies.
func TestEmbeddedCarriesEngineDefaultBody(t *testing.T) {
	tr := open(t, natsjs.Config{})
	if got := tr.MaxMessageBytes(); got < 1<<20 {
		t.Fatalf("MaxMessageBytes on the default embedded server: %d, want at least 1 MiB", got)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := tr.Publish(ctx, []transport.Envelope{engineLike("mib", bytes.Repeat([]byte("m"), 1<<20))}); err != nil {
		t.Fatalf("Publish of a 1 MiB body: %v", err)
	}
}

// A stream's max_msg_size below the server's max_payload bounds
// MaxMessageBytes, and the refusal names it.
func TestMaxMessageBytesFollowsStreamMaxMsgSize(t *testing.T) {
	srv := sharedServer(t)
	stream := randName("MSGSIZE_")
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	const maxMsgSize = 32 << 10
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, MaxMsgSize: maxMsgSize}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteStream(t, srv.URL(), stream) })
	tr := open(t, natsjs.Config{Stream: stream})
	if got, want := tr.MaxMessageBytes(), maxMsgSize-natsjs.HeaderReserve; got != want {
		t.Fatalf("MaxMessageBytes: got %d, want %d", got, want)
	}
	err = tr.Publish(t.Context(), []transport.Envelope{{ID: "m", Type: "T", Body: make([]byte, maxMsgSize)}})
	if !errors.Is(err, natsjs.ErrTooLarge) || !strings.Contains(err.Error(), "max_msg_size") {
		t.Fatalf("Publish above the stream's max_msg_size: got %v, want ErrTooLarge naming max_msg_size", err)
	}
}

// Each Transport fences by its own Config.AckWait: a second one with
// another AckWait must not change the consumer under the first one (whose
// leases would then outlive the server's), but be refused.
func TestOpenRefusesOtherAckWait(t *testing.T) {
	first := open(t, natsjs.Config{AckWait: time.Second})
	stream := strings.Split(first.Subject(&transport.Envelope{ID: "x", Type: "x"}), ".")[0]
	url := sharedServer(t).URL()
	second, err := natsjs.Open(t.Context(), url, &natsjs.Config{Stream: stream, AckWait: 3 * time.Second})
	if err == nil {
		_ = second.Close()
		t.Fatal("Open with another AckWait than the consumer's: got no error")
	}
	for _, want := range []string{"Config.AckWait", "1s", "3s", "nats consumer edit"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	c, err := js.Consumer(t.Context(), stream, "idem-p0")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.AckWait; got != time.Second {
		t.Fatalf("consumer AckWait after the refused Open: %v, want the first transport's 1s", got)
	}
	// The same AckWait is accepted, and other settings still follow Config.
	third, err := natsjs.Open(t.Context(), url, &natsjs.Config{Stream: stream, AckWait: time.Second, MaxAckPending: 7})
	if err != nil {
		t.Fatalf("Open with the consumer's AckWait: %v", err)
	}
	defer third.Close()
	ci, err := c.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if ci.Config.MaxAckPending != 7 {
		t.Errorf("consumer MaxAckPending: %d, want 7 from the last Open", ci.Config.MaxAckPending)
	}
}

// A message brought by a pull request that Receive gave up on, still held
// at Close, comes back to another Transport at once, not after AckWait.
func TestCloseReturnsHeldMessages(t *testing.T) {
	const ackWait = 20 * time.Second
	stream := randName("HELD_")
	first := open(t, natsjs.Config{Stream: stream, AckWait: ackWait})
	second, err := natsjs.Open(t.Context(), sharedServer(t).URL(), &natsjs.Config{Stream: stream, AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()

	// A Receive that gives up leaves its pull request waiting; the message
	// published next goes to it and the first transport holds it.
	short, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	_, err = first.Receive(short, 1)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive on an empty stream: got %v, want the context's deadline", err)
	}
	if err := second.Publish(t.Context(), []transport.Envelope{{ID: "held-1", Type: "T", SentAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	// Polling for the message to reach the abandoned pull request, with a
	// deadline (the request waits up to 5 s).
	for deadline := time.Now().Add(4 * time.Second); first.Held() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the first transport never held the message")
		}
		time.Sleep(10 * time.Millisecond)
	}

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second) // well under AckWait
	defer cancel()
	ds, err := second.Receive(ctx, 1)
	if err != nil {
		t.Fatalf("Receive after the holder closed: %v (the message waits out AckWait %v)", err, ackWait)
	}
	if ds[0].Envelope.ID != "held-1" {
		t.Fatalf("received %s, want held-1", ds[0].Envelope.ID)
	}
	if err := second.Ack(ctx, ds); err != nil {
		t.Fatal(err)
	}
}

package natsembed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/transport/natsjs/natsembed"
)

// Deleting an account's last stream makes nats-server remove the
// account's streams directory in a goroutine, which raced the creation of
// the next stream: "error creating store for stream" (mkdir
// …/streams/NAME: no such file or directory). Tests that make a stream
// each and delete it at the end failed that way now and then. Creating
// and deleting a stream repeatedly, one at a time, must never fail.
func TestCreateStreamAfterDeletingTheLast(t *testing.T) {
	srv, err := natsembed.Start(t.Context(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for i := range 200 {
		name := fmt.Sprintf("S%d", i)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage}); err != nil {
			t.Fatalf("creating stream %d after deleting the one before: %v", i, err)
		}
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Fatalf("deleting stream %d: %v", i, err)
		}
	}
}

// A server started again on the same directory and port recovers its
// streams (the directory keepStreamsDir adds is passed over) and its
// clients reconnect.
func TestRestartRecoversStreams(t *testing.T) {
	dir := t.TempDir()
	srv, err := natsembed.Start(t.Context(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	port := srv.Port()
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEPT", Subjects: []string{"kept.>"}, Storage: jetstream.FileStorage}); err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "kept.a", []byte("x")); err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	srv.Shutdown()

	srv, err = natsembed.Start(t.Context(), dir, &natsembed.Config{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	s, err := js.Stream(ctx, "KEPT")
	if err != nil {
		t.Fatalf("stream after a restart: %v", err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("stream after a restart holds %d messages, want 1", n)
	}
	names := js.StreamNames(ctx)
	var got []string
	for n := range names.Name() {
		got = append(got, n)
	}
	if names.Err() != nil || len(got) != 1 || got[0] != "KEPT" {
		t.Fatalf("streams after a restart: %v (%v), want [KEPT]", got, names.Err())
	}
}

package redisstreams_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/silentproxy"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/redisstreams"
)

// silentLink opens a transport whose connections pass through a proxy
// that the test can mute, with go-redis's read and write timeouts set to a
// minute: far above what the test waits for, so that only the transport's
// own handling of a context can end a command on the silent link.
func silentLink(t *testing.T, cfg redisstreams.Config) (*redisstreams.Transport, *silentproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	px, err := silentproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	u.Host = px.Addr()
	q := u.Query()
	q.Set("read_timeout", "60s")
	q.Set("write_timeout", "60s")
	u.RawQuery = q.Encode()
	return open(t, cfg, u.String()), px
}

// A command in flight when the link to Redis goes silent ends with its
// context: a Publish whose context is cancelled returns at once, with the
// context's error, instead of waiting out go-redis's read timeout.
func TestCommandOnSilentLinkEndsWithItsContext(t *testing.T) {
	tr, px := silentLink(t, redisstreams.Config{Namespace: namespace(t), Partitions: 2})
	publish(t, tr, env("before", "k")) // the link works
	px.Mute()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Publish(ctx, []transport.Envelope{env("during", "k")}) }()
	select {
	case <-px.SentWhileMuted():
	case err := <-done:
		t.Fatalf("Publish on a silent link returned before its context ended: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Publish on a silent link after its context was cancelled: got %v, want an error wrapping context.Canceled", err)
		}
	case <-time.After(30 * time.Second): // half of go-redis's read timeout here
		t.Fatal("Publish on a silent link did not return after its context was cancelled: it waits for go-redis's read timeout")
	}
}

// Engine.Run stops within Config.StopTimeout when the link to Redis goes
// silent while a batch is settled: the acknowledgement in flight ends with
// the engine's abort instead of waiting for go-redis's read timeout (a
// minute here). Run then reports that it did not stop in time.
func TestRunStopsOnSilentLink(t *testing.T) {
	tr, px := silentLink(t, redisstreams.Config{Namespace: namespace(t), Partitions: 2, Lease: time.Minute})
	e, err := idem.NewEngine(memstore.New(nil), tr, &idem.Config{Lanes: 1, StopTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	if err := e.Handle("test.Ping", func(ctx context.Context, _ idem.Envelope) error {
		close(entered)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- e.Run(ctx) }()
	publish(t, tr, env("m-1", "k"))
	select {
	case <-entered:
	case err := <-ran:
		t.Fatalf("Run returned before the handler ran: %v", err)
	}
	// The link goes silent while the handler runs; the engine is told to
	// stop, and the handler's batch is acknowledged on the silent link.
	px.Mute()
	cancel()
	close(release)
	select {
	case err := <-ran:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Run on a silent link: got %v, want the error saying it did not stop within StopTimeout", err)
		}
	case <-time.After(30 * time.Second): // StopTimeout is 1s; go-redis's read timeout 60s
		t.Fatal("Run did not return within 30s of its context ending, with StopTimeout 1s: a command on the silent link waits for go-redis's read timeout")
	}
}

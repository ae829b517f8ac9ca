package redisstreams_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/redisstreams"
)

func openErr(t *testing.T, url string, cfg redisstreams.Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := redisstreams.Open(ctx, url, &cfg)
	if err == nil {
		_ = tr.Close()
		t.Fatal("Open succeeded, want a refusal")
	}
	if strings.Contains(err.Error(), "secret-pw") {
		t.Errorf("the error shows the password: %v", err)
	}
	return err
}

func wantAdvice(t *testing.T, err error, advice ...string) {
	t.Helper()
	for _, a := range advice {
		if !strings.Contains(err.Error(), a) {
			t.Errorf("error %q does not say %q", err, a)
		}
	}
}

// openOK opens a transport on url and closes it, failing the test on error.
func openOK(t *testing.T, url string, cfg redisstreams.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := redisstreams.Open(ctx, url, &cfg)
	if err != nil {
		t.Fatalf("Open with %+v: %v", cfg, err)
	}
	_ = tr.Close()
}

// Refusals that need no server, or only the shared one.
func TestOpenRefuses(t *testing.T) {
	t.Run("UnauthenticatedRemote", func(t *testing.T) {
		// Refused before anything is sent: 192.0.2.1 (TEST-NET-1) is never
		// contacted, so the refusal comes at once.
		start := time.Now()
		err := openErr(t, "redis://192.0.2.1:6379/0", redisstreams.Config{})
		wantAdvice(t, err, "has no password", "192.0.2.1 is not a loopback address", "requirepass", "Config.AllowUnauthenticated")
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("refusal took %v: it should not have tried to connect", d)
		}
		err = openErr(t, "redis://someone@[2001:db8::1]:6379/0", redisstreams.Config{})
		wantAdvice(t, err, "has no password", "2001:db8::1")
	})
	t.Run("NotARedisURL", func(t *testing.T) {
		err := openErr(t, "http://user:secret-pw@127.0.0.1/", redisstreams.Config{})
		wantAdvice(t, err, "not a Redis URL", "redis://")
	})
	t.Run("BadConfig", func(t *testing.T) {
		for field, cfg := range map[string]redisstreams.Config{
			"Config.Partitions":   {Partitions: 2000},
			"Config.Namespace":    {Namespace: "a{b}"},
			"Config.Lease":        {Lease: -time.Second},
			"Config.PollInterval": {PollInterval: -1},
		} {
			wantAdvice(t, openErr(t, "redis://127.0.0.1:1/0", cfg), field)
		}
	})
	t.Run("Unreachable", func(t *testing.T) {
		err := openErr(t, "redis://:secret-pw@127.0.0.1:1/0", redisstreams.Config{})
		wantAdvice(t, err, "cannot reach the Redis server at redis://:xxxxx@127.0.0.1:1/0", "running and listening")
	})
	t.Run("OtherPartitionCount", func(t *testing.T) {
		ns := namespace(t)
		open(t, redisstreams.Config{Namespace: ns, Partitions: 4}).Close()
		err := openErr(t, testenv.RedisURL(t), redisstreams.Config{Namespace: ns, Partitions: 16})
		wantAdvice(t, err, "created with 4 partitions, not 16", "same Config.Partitions")
	})
}

// A server that may lose what it acknowledged is refused unless the user
// accepts the loss, and so is one that may evict the streams; each refusal
// says what to change.
func TestOpenRefusesUnsafeServer(t *testing.T) {
	s := startServer(t, "--appendonly", "no")
	c := s.client(t)
	ctx := context.Background()
	set := func(k, v string) {
		t.Helper()
		if err := c.ConfigSet(ctx, k, v).Err(); err != nil {
			t.Fatalf("CONFIG SET %s %s: %v", k, v, err)
		}
	}

	err := openErr(t, s.url(), redisstreams.Config{})
	wantAdvice(t, err, "appendonly no, appendfsync always", "appendonly yes and appendfsync always", "Config.AllowLossOnCrash", "acknowledged messages may be lost")
	openOK(t, s.url(), redisstreams.Config{AllowLossOnCrash: true})

	set("appendonly", "yes")
	set("appendfsync", "everysec")
	err = openErr(t, s.url(), redisstreams.Config{})
	wantAdvice(t, err, "appendonly yes, appendfsync everysec", "Config.AllowLossOnCrash")
	openOK(t, s.url(), redisstreams.Config{AllowLossOnCrash: true})

	set("appendfsync", "always")
	openOK(t, s.url(), redisstreams.Config{})

	set("maxmemory-policy", "allkeys-lru")
	err = openErr(t, s.url(), redisstreams.Config{})
	wantAdvice(t, err, "maxmemory-policy allkeys-lru", "noeviction", "Config.AllowEviction")
	openOK(t, s.url(), redisstreams.Config{AllowEviction: true})
	set("maxmemory-policy", "volatile-lru") // spares keys without a TTL
	openOK(t, s.url(), redisstreams.Config{})

	// A server whose settings cannot be read: CONFIG is not allowed.
	if err := c.Do(ctx, "ACL", "SETUSER", "noconfig", "on", ">secret-pw", "~*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	u := "unix://noconfig:secret-pw@" + s.sock
	err = openErr(t, u, redisstreams.Config{})
	wantAdvice(t, err, "cannot read appendfsync", "Config.AllowLossOnCrash")
	openOK(t, u, redisstreams.Config{AllowLossOnCrash: true})

	// Wrong credentials.
	err = openErr(t, "unix://noconfig:wrong-secret-pw@"+s.sock, redisstreams.Config{})
	wantAdvice(t, err, "refused the user name or password")
}

// A password in the URL satisfies the authentication rule; the error of a
// wrong one shows neither password.
func TestOpenWithPassword(t *testing.T) {
	s := startServer(t, "--requirepass", "secret-pw")
	u := &url.URL{Scheme: "unix", User: url.UserPassword("", "secret-pw"), Path: s.sock}
	openOK(t, u.String(), redisstreams.Config{})
	u.User = url.UserPassword("", "wrong-secret-pw")
	err := openErr(t, u.String(), redisstreams.Config{})
	wantAdvice(t, err, "refused the user name or password")
}

// The body limit follows the server's proto-max-bulk-len, and Publish
// refuses a larger body before sending anything of the batch.
func TestMaxMessageBytes(t *testing.T) {
	s := startServer(t, "--proto-max-bulk-len", "1mb")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := redisstreams.Open(ctx, s.url(), &redisstreams.Config{Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	want := 1<<20 - 1<<16
	if got := tr.MaxMessageBytes(); got != want {
		t.Fatalf("MaxMessageBytes = %d, want %d (1 MiB proto-max-bulk-len less 64 KiB)", got, want)
	}
	envs := []transport.Envelope{
		{ID: "fits", Type: "t", Body: make([]byte, want)},
		{ID: "too-large", Type: "t", Body: make([]byte, want+1)},
	}
	if err := tr.Publish(ctx, envs); !errors.Is(err, transport.ErrTooLarge) || !strings.Contains(err.Error(), "too-large") {
		t.Fatalf("Publish of a body over the limit: got %v, want ErrTooLarge naming too-large", err)
	}
	if ready, unacked, err := tr.Pending(ctx); err != nil || ready != 0 || unacked != 0 {
		t.Fatalf("after the refused batch: Pending = %d, %d, %v; want nothing published", ready, unacked, err)
	}
	if err := tr.Publish(ctx, envs[:1]); err != nil {
		t.Fatalf("Publish of a body at the limit: %v", err)
	}
	ds, err := tr.Receive(ctx, 1)
	if err != nil || len(ds) != 1 || len(ds[0].Envelope.Body) != want {
		t.Fatalf("Receive: %d deliveries, %v; want the %d-byte body", len(ds), err, want)
	}
}

// The ACL the documentation gives (docs/transport-redis.md and Open's
// NOPERM advice) is enough for everything the transport does, and a user
// without it is told what to grant.
func TestDocumentedACLSuffices(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acl := []any{"ACL", "SETUSER", "idem", "on", ">secret-pw", "~{idem}:*", "+@stream", "+@sortedset", "+@hash", "+@scripting", "+@connection", "+info", "+config|get", "+time"}
	if err := c.Do(ctx, acl...).Err(); err != nil {
		t.Fatal(err)
	}
	// Every script runs: receive (with its XAUTOCLAIM pass and its
	// XREAD wait), settle as a nack and as an ack, pending.
	tr, err := redisstreams.Open(ctx, "unix://idem:secret-pw@"+s.sock, &redisstreams.Config{Partitions: 2, Lease: time.Minute})
	if err != nil {
		t.Fatalf("Open with the documented ACL: %v", err)
	}
	defer tr.Close()
	publish(t, tr, env("a", "k1"), env("b", "k2"))
	ds := receive(t, tr, 2, 5*time.Second)
	if err := tr.Nack(ctx, ds[0], 100*time.Millisecond); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	again := receive(t, tr, 1, 5*time.Second)
	if again[0].Envelope.ID != ds[0].Envelope.ID || again[0].Attempt != 2 {
		t.Fatalf("after the Nack: got %s attempt %d, want %s attempt 2", again[0].Envelope.ID, again[0].Attempt, ds[0].Envelope.ID)
	}
	if err := tr.Ack(ctx, append(again, ds[1])); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	wantPending(t, tr, 0, 0)

	if err := c.Do(ctx, "ACL", "SETUSER", "nostream", "on", ">secret-pw", "~*", "+@connection", "+info", "+config|get").Err(); err != nil {
		t.Fatal(err)
	}
	err = openErr(t, "unix://nostream:secret-pw@"+s.sock, redisstreams.Config{Partitions: 2})
	wantAdvice(t, err, "lacks a permission", "ACL SETUSER")
}

package redisstreams_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/transport/redisstreams"
)

// recorder is a slog.Handler that keeps the records it is given.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// matching returns the records whose message contains s.
func (r *recorder) matching(s string) []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []slog.Record
	for _, rec := range r.recs {
		if strings.Contains(rec.Message, s) {
			out = append(out, rec)
		}
	}
	return out
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// A line go-redis logs itself (here: a dial that failed, as in an outage)
// reaches the slog handler LogTo names as one record, with the line as its
// message and component=go-redis, instead of go-redis's own stderr logger.
// Not parallel: go-redis's logger is global to the process.
func TestLogToRoutesGoRedisLinesThroughSlog(t *testing.T) {
	rec := &recorder{}
	redisstreams.LogTo(slog.New(rec))
	t.Cleanup(func() { redisstreams.LogTo(nil) })

	addr := closedAddr(t)
	c := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, MaxRetries: -1, DialTimeout: 5 * time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatalf("ping of %s (nothing listens): no error", addr)
	}
	got := rec.matching(addr)
	if len(got) == 0 {
		t.Fatalf("no slog record mentions %s: go-redis's line did not reach the handler (records: %d)", addr, len(rec.matching("")))
	}
	r := got[0]
	if !strings.Contains(r.Message, "failed to dial") || strings.HasSuffix(r.Message, "\n") {
		t.Errorf("message %q: want go-redis's dial failure, without a trailing newline", r.Message)
	}
	if r.Level != slog.LevelInfo {
		t.Errorf("level %v, want %v", r.Level, slog.LevelInfo)
	}
	var component string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "component" {
			component = a.Value.String()
		}
		return true
	})
	if component != redisstreams.ComponentGoRedis {
		t.Errorf("component %q, want %q", component, redisstreams.ComponentGoRedis)
	}
}

// SlogLogger logs at its Level, and not at all below its handler's level.
func TestSlogLoggerLevel(t *testing.T) {
	rec := &recorder{}
	redisstreams.SlogLogger{Logger: slog.New(rec), Level: slog.LevelWarn}.Printf(context.Background(), "redis: %s %d\n", "line", 1)
	got := rec.matching("redis: line 1")
	if len(got) != 1 || got[0].Message != "redis: line 1" || got[0].Level != slog.LevelWarn {
		t.Fatalf("records %+v, want one WARN record \"redis: line 1\"", got)
	}

	var quiet strings.Builder
	h := slog.NewTextHandler(&quiet, &slog.HandlerOptions{Level: slog.LevelError})
	redisstreams.SlogLogger{Logger: slog.New(h), Level: slog.LevelWarn}.Printf(context.Background(), "redis: dropped")
	if quiet.Len() != 0 {
		t.Errorf("a WARN line below the handler's ERROR level was written: %q", quiet.String())
	}
}

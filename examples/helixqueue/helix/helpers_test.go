package helix_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/examples/helixqueue/helix"
	"github.com/idemhq/idem/internal/testenv"
)

func randHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func redisURL(t testing.TB) string {
	t.Helper()
	return testenv.Server(t, "IDEM_TEST_REDIS_URL", "Redis tests", "redis://127.0.0.1:6379/0")
}

// eachStore runs fn on SQLite and on PostgreSQL (a schema of its own), with
// Redis Streams (a namespace of its own) as the transport.
func eachStore(t *testing.T, fn func(t *testing.T, o helix.Options)) {
	t.Run("sqlite", func(t *testing.T) {
		fn(t, helix.Options{Store: filepath.Join(t.TempDir(), "helix.db"), Redis: redisURL(t), Namespace: "helixtest_" + randHex()})
	})
	t.Run("postgres", func(t *testing.T) {
		url := testenv.PostgresURL(t)
		o := helix.Options{Store: url, Schema: "helixtest_" + randHex(), Redis: redisURL(t), Namespace: "helixtest_" + randHex()}
		t.Cleanup(func() {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Errorf("drop schema %s: %v", o.Schema, err)
				return
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{o.Schema}.Sanitize()+" CASCADE"); err != nil {
				t.Errorf("drop schema %s: %v", o.Schema, err)
			}
		})
		fn(t, o)
	})
}

// start opens an App and starts its engine until the test ends.
func start(t *testing.T, o helix.Options) *helix.App {
	t.Helper()
	ctx := context.Background()
	a, err := helix.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Engine.Start(ctx); err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, a) })
	return a
}

// stop stops a's engine and closes it (a killed worker process).
func stop(t testing.TB, a *helix.App) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Engine.Stop(ctx); err != nil {
		t.Logf("stop engine: %v", err)
	}
	a.Close()
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling an observable outcome
	}
}

// transitions renders audit rows as "FROM→TO/worker/attempt".
func transitions(rows []helix.AuditRow) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.From+"→"+r.To+"/"+r.Worker+"/"+itoa(r.Attempt))
	}
	return out
}

func itoa(i int) string {
	const d = "0123456789"
	if i < 10 {
		return d[i : i+1]
	}
	return itoa(i/10) + d[i%10:i%10+1]
}

// streams is what Redis holds of a namespace: the entries of its streams,
// and the consumer group's consumers, entries read and pending deliveries,
// summed over the partitions.
type streams struct {
	entries, consumers, read, pending int64
}

// streamState reads o.Namespace's streams straight from Redis.
func streamState(t *testing.T, o helix.Options) streams {
	t.Helper()
	ctx := testCtx(t)
	opt, err := redis.ParseURL(o.Redis)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	keys, err := rdb.Keys(ctx, "{"+o.Namespace+"}:p*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var s streams
	for _, k := range keys {
		if typ, err := rdb.Type(ctx, k).Result(); err != nil || typ != "stream" {
			continue
		}
		n, err := rdb.XLen(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		s.entries += n
		gs, err := rdb.XInfoGroups(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gs {
			s.consumers += g.Consumers
			s.read += g.EntriesRead
			s.pending += g.Pending
		}
	}
	return s
}

// run runs the command line and returns its exit code, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := helix.Main(testCtx(t), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// storeArgs are the flags that name o's store (and schema).
func storeArgs(o helix.Options) []string {
	args := []string{"--store", o.Store}
	if o.Schema != "" {
		args = append(args, "--schema", o.Schema)
	}
	return args
}

// redisArgs are the flags that name o's Redis namespace.
func redisArgs(o helix.Options) []string {
	return []string{"--redis", o.Redis, "--namespace", o.Namespace}
}

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// records returns the records kept so far.
func (l *logRecorder) records() []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.recs)
}

// describe renders a record as "LEVEL message key=value…".
func describe(r slog.Record) string {
	s := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		s += " " + a.String()
		return true
	})
	return s
}

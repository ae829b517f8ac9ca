package helix_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

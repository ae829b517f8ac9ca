// Package testenv gives tests the servers that scripts/test starts.
//
// A test that needs a server asks for its URL here. Outside scripts/test,
// where the variable is unset, the test is skipped with a message naming
// the variable to set; scripts/test sets IDEM_REQUIRE_SERVERS=1, which turns
// that skip into a failure, so a server that failed to start cannot pass
// silently.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Server returns the value of the environment variable env, which names a
// server for what (for example "PostgreSQL tests"); example is a value to
// suggest. Without it, t is skipped, or failed under IDEM_REQUIRE_SERVERS.
func Server(t testing.TB, env, what, example string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		if os.Getenv("IDEM_REQUIRE_SERVERS") != "" {
			t.Fatalf("%s is not set but IDEM_REQUIRE_SERVERS is: scripts/test should have set it", env)
		}
		t.Skipf("%s need a server: set %s=%s (scripts/test starts one)", what, env, example)
	}
	return v
}

// PostgresURL returns IDEM_TEST_PG_URL, the PostgreSQL server of the tests.
func PostgresURL(t testing.TB) string {
	t.Helper()
	return Server(t, "IDEM_TEST_PG_URL", "PostgreSQL tests", "postgres://user@127.0.0.1:5432/db")
}

// AMQPURL returns IDEM_TEST_AMQP_URL, the RabbitMQ server of the tests.
func AMQPURL(t testing.TB) string {
	t.Helper()
	return Server(t, "IDEM_TEST_AMQP_URL", "RabbitMQ tests", "amqp://guest:guest@127.0.0.1:5672/")
}

// Chromium returns the path of a Chromium (or Chrome) binary for browser
// tests: IDEM_CHROMIUM when set, else chromium, chromium-browser or
// google-chrome on PATH. Without one, t is skipped, or failed under
// IDEM_REQUIRE_SERVERS (scripts/test installs Debian's chromium).
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("IDEM_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("IDEM_REQUIRE_SERVERS") != "" {
		t.Fatal("no chromium on PATH and IDEM_CHROMIUM is not set, but IDEM_REQUIRE_SERVERS is: scripts/test should have installed it")
	}
	t.Skip("browser tests need Chromium: apt-get install chromium, or set IDEM_CHROMIUM=/path/to/chrome (scripts/test installs it)")
	return ""
}

// RedisURL returns IDEM_TEST_REDIS_URL, the Redis server of the tests
// (scripts/redis.sh starts one with appendonly yes and appendfsync always).
func RedisURL(t testing.TB) string {
	t.Helper()
	return Server(t, "IDEM_TEST_REDIS_URL", "Redis tests", "redis://127.0.0.1:6379/0")
}

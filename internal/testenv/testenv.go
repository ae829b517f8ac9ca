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

// RedisURL returns IDEM_TEST_REDIS_URL, the Redis server of the tests
// (scripts/redis.sh starts one with appendonly yes and appendfsync always).
func RedisURL(t testing.TB) string {
	t.Helper()
	return Server(t, "IDEM_TEST_REDIS_URL", "Redis tests", "redis://127.0.0.1:6379/0")
}

package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store/pgstore"
)

// pgbouncerURL returns IDEM_TEST_PGBOUNCER_URL: PgBouncer in transaction
// pooling mode in front of the test PostgreSQL (scripts/pgbouncer.sh).
func pgbouncerURL(t *testing.T) string {
	t.Helper()
	return testenv.Server(t, "IDEM_TEST_PGBOUNCER_URL", "PgBouncer tests", "postgres://postgres@127.0.0.1:6432/postgres?sslmode=disable")
}

// wantPoolerAdvice fails unless err names the pooler and what to
// configure, and does not send the operator to check that the server runs.
func wantPoolerAdvice(t *testing.T, what string, err error, advice ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s through PgBouncer in transaction mode: got nil error, want a refusal naming the pooler", what)
	}
	msg := err.Error()
	if strings.Contains(msg, "cannot reach") || strings.Contains(msg, "check that the server runs") {
		t.Errorf("%s through PgBouncer: the error sends the operator to check that the server runs: %v", what, err)
	}
	for _, a := range append([]string{"PgBouncer", "session"}, advice...) {
		if !strings.Contains(msg, a) {
			t.Errorf("%s through PgBouncer: error %q does not mention %q", what, msg, a)
		}
	}
}

// Open through PgBouncer is refused because PgBouncer refuses the
// search_path startup parameter: the error says so, and what to do.
func TestOpenThroughPgBouncerSaysWhatIsWrong(t *testing.T) {
	url := pgbouncerURL(t)
	s, err := pgstore.Open(context.Background(), url, &pgstore.Config{Schema: "t_" + randHex()})
	if err == nil {
		_ = s.Close()
	}
	wantPoolerAdvice(t, "Open", err, "search_path", "startup parameter")
}

// A pool with pgx's default statement cache, through PgBouncer in
// transaction mode, finds another client's prepared statement on the
// server session it is given: New says that the pooler shares sessions,
// and what to configure.
func TestNewOnTransactionPoolerSaysWhatIsWrong(t *testing.T) {
	url := pgbouncerURL(t)
	ctx := context.Background()
	var last error
	// The first pool prepares pgx's cached statements on the server
	// session PgBouncer gives it; the second is given the same session
	// (the only idle one) and prepares them again.
	for range 2 {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pgstore.New(ctx, pool, &pgstore.Config{Schema: "public"})
		if err == nil {
			_ = s.Close()
		}
		pool.Close()
		last = err
	}
	wantPoolerAdvice(t, "New", last, "prepared statement", "QueryExecModeExec")
}

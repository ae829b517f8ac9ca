package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresDatabase creates a database of its own on the server of
// PostgresURL and returns a URL that connects to it; the database is
// dropped when the test ends. A test that reads the database's own
// statistics (pg_stat_database) uses it, so that the engines of other
// packages on the shared server do not count in them. name is a prefix
// made of lower-case letters.
func PostgresDatabase(t testing.TB, name string) string {
	t.Helper()
	base := PostgresURL(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("IDEM_TEST_PG_URL: %v", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	db := name + "_" + hex.EncodeToString(b[:])
	admin := func(sql string, wait time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, sql)
		return err
	}
	if err := admin("CREATE DATABASE "+pgx.Identifier{db}.Sanitize(), 30*time.Second); err != nil {
		t.Fatalf("create database %s: %v", db, err)
	}
	t.Cleanup(func() {
		// PostgreSQL 15 forces an immediate checkpoint for each DROP
		// DATABASE, which on a loaded shared server took over 30 s in
		// CI. What the test checked is settled by then: a database left
		// behind on the throwaway server is logged, not a failure.
		if err := admin("DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)", 3*time.Minute); err != nil {
			t.Logf("drop database %s: %v (left on the test server)", db, err)
		}
	})
	u.Path = "/" + db
	return u.String()
}

package pgstore_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

func TestOpenRefusesUnreachableServer(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: take one and close it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = pgstore.Open(ctx, "postgres://idem:s3cret@"+addr+"/idem?sslmode=disable&connect_timeout=2", nil)
	if err == nil {
		t.Fatal("Open succeeded on a closed port")
	}
	msg := err.Error()
	for _, want := range []string{"cannot reach PostgreSQL at " + addr, "check that the server runs"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "s3cret") {
		t.Errorf("error %q shows the password", msg)
	}
}

func TestOpenRefusesMissingSchemaWithoutMigrate(t *testing.T) {
	t.Parallel()
	u := testenv.PostgresURL(t)
	_, err := pgstore.Open(context.Background(), u, &pgstore.Config{Schema: "never_migrated_" + randHex()})
	if !errors.Is(err, store.ErrNotMigrated) || !strings.Contains(err.Error(), "idem migrate") {
		t.Fatalf("Open on an empty schema: got %v, want store.ErrNotMigrated saying to run idem migrate", err)
	}
}

func TestOpenRefusesAsynchronousCommit(t *testing.T) {
	t.Parallel()
	u := withOptions(t, testenv.PostgresURL(t), "-c synchronous_commit=off")
	_, err := pgstore.Open(context.Background(), u, &pgstore.Config{Schema: "unsafe_" + randHex()})
	if !errors.Is(err, pgstore.ErrUnsafeCommit) || !strings.Contains(err.Error(), "synchronous_commit=off") || !strings.Contains(err.Error(), "AllowUnsafeCommit") {
		t.Fatalf("Open with synchronous_commit=off: got %v, want ErrUnsafeCommit naming the setting and the opt-in", err)
	}
	// With the opt-in, the same server is accepted.
	schema := "unsafe_ok_" + randHex()
	s, err := pgstore.Open(context.Background(), u, &pgstore.Config{Schema: schema, Migrate: true, AllowUnsafeCommit: true})
	if err != nil {
		t.Fatalf("Open with AllowUnsafeCommit: %v", err)
	}
	s.Close()
	conn := schemaConn(t, "public")
	if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Fatal(err)
	}
}

func TestMigrateWithoutPermissionSaysWhatToDo(t *testing.T) {
	t.Parallel()
	u := testenv.PostgresURL(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	role := "idem_ro_" + randHex()
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP ROLE "+role) })
	ru, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	// PostgreSQL 15 gives PUBLIC no CREATE on the database; make sure.
	db := pgx.Identifier{strings.TrimPrefix(ru.Path, "/")}.Sanitize()
	if _, err := admin.Exec(ctx, "REVOKE CREATE ON DATABASE "+db+" FROM PUBLIC"); err != nil {
		t.Fatal(err)
	}
	ru.User = url.User(role)
	_, err = pgstore.Open(ctx, ru.String(), &pgstore.Config{Schema: "denied_" + randHex(), Migrate: true})
	if err == nil || !strings.Contains(err.Error(), "permission denied") || !strings.Contains(err.Error(), "idem migrate") {
		t.Fatalf("Open with Migrate as a role without CREATE: got %v, want permission denied and what to do", err)
	}
}

func withOptions(t *testing.T, raw, options string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += "options=" + strings.ReplaceAll(url.QueryEscape(options), "+", "%20")
	return u.String()
}

package helix_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/examples/helixqueue/helix"
)

// The default Redis namespace follows the store: one per SQLite file,
// whatever the path's spelling, and one per PostgreSQL database and
// schema, whoever connects.
func TestDefaultNamespaceFollowsTheStore(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ns := func(store, schema string) string {
		t.Helper()
		n, err := helix.DefaultNamespace(store, schema)
		if err != nil {
			t.Fatalf("DefaultNamespace(%q, %q): %v", store, schema, err)
		}
		if !strings.HasPrefix(n, "helixqueue-") || len(n) > 100 {
			t.Fatalf("DefaultNamespace(%q, %q) = %q: want helixqueue- and a hash", store, schema, n)
		}
		return n
	}
	const pg = "postgres://alice:secret@db.example:5432/lab"
	for _, c := range []struct {
		a, b   [2]string
		shared bool
	}{
		{[2]string{"a.db", ""}, [2]string{"b.db", ""}, false},
		{[2]string{"a.db", ""}, [2]string{filepath.Join(dir, "a.db"), ""}, true},
		{[2]string{"a.db", ""}, [2]string{"./sub/../a.db", "other"}, true},
		{[2]string{pg, "helixqueue"}, [2]string{"postgres://bob:pw@db.example:5432/lab", ""}, true},
		{[2]string{pg, "helixqueue"}, [2]string{pg, "helixdemo"}, false},
		{[2]string{pg, "helixqueue"}, [2]string{"postgres://alice:secret@db.example:5432/lab2", "helixqueue"}, false},
		{[2]string{pg, "helixqueue"}, [2]string{"postgres://alice:secret@db2.example:5432/lab", "helixqueue"}, false},
	} {
		if got := ns(c.a[0], c.a[1]) == ns(c.b[0], c.b[1]); got != c.shared {
			t.Errorf("%q and %q share a namespace: %v, want %v", c.a, c.b, got, c.shared)
		}
	}
}

// A batch submitted on one store is applied there, never by a process on
// another store that uses the same Redis: the README's own sequence runs
// SQLite, then PostgreSQL, then by hand on one Redis.
func TestStoresOnOneRedisKeepTheirBatches(t *testing.T) {
	ctx := testCtx(t)
	url := redisURL(t)
	oa := helix.Options{Store: filepath.Join(t.TempDir(), "a.db"), Redis: url}
	ob := helix.Options{Store: filepath.Join(t.TempDir(), "b.db"), Redis: url}
	for _, o := range []helix.Options{oa, ob} {
		ns, err := helix.DefaultNamespace(o.Store, "")
		if err != nil {
			t.Fatal(err)
		}
		dropNamespace(t, url, ns) // runs after the processes stopped
	}
	a, err := helix.Open(ctx, oa)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, a) })
	stray, err := a.Publish(ctx, "Stray-777") // waits in Redis: a's engine is not started
	if err != nil {
		t.Fatal(err)
	}
	b := start(t, ob)
	if a.Namespace() == b.Namespace() {
		t.Fatalf("stores %s and %s share the Redis namespace %q", oa.Store, ob.Store, a.Namespace())
	}
	if _, err := b.Submit(ctx, "Other-1"); err != nil {
		t.Fatal(err)
	}
	if err := a.Engine.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stray batch applied on its own store", 30*time.Second, func() bool {
		rows, err := a.DB.Audit(ctx, stray)
		return err == nil && len(rows) > 0
	})
	if rows, err := b.DB.Audit(ctx, stray); err != nil || len(rows) != 0 {
		t.Fatalf("the other store's audit of %s: %d rows (%v), want none", stray, len(rows), err)
	}
}

// dropNamespace deletes ns's keys from Redis when the test ends.
func dropNamespace(t *testing.T, url, ns string) {
	t.Cleanup(func() {
		opt, err := redis.ParseURL(url)
		if err != nil {
			t.Error(err)
			return
		}
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		ctx := context.Background()
		keys, err := rdb.Keys(ctx, "{"+ns+"}:*").Result()
		if err == nil && len(keys) > 0 {
			err = rdb.Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Errorf("drop Redis namespace %s: %v", ns, err)
		}
	})
}

package redisstreams

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testenv"
)

// The expected values are PostgreSQL 15's hashtext(key) & 2147483647, the
// same table package rabbitmq's hash is tested against: the two copies
// agree, and both agree with pgstore's partitions.
func TestPartitionHashIsPostgresHashtext(t *testing.T) {
	for key, want := range map[string]uint32{
		"":                            669664877,
		"a":                           1075015857,
		"key-17":                      455029860,
		"upload/Grüße-42":             1575737061,
		"0123456789ab":                710268555,
		"0123456789abcdefghijklmnopq": 440382357,
	} {
		if got := partitionHash(key); got != want {
			t.Errorf("partitionHash(%q) = %d, want %d", key, got, want)
		}
	}
}

// Against a live PostgreSQL (when IDEM_TEST_PG_URL is set, as scripts/test
// does): random keys of every length up to 64 bytes, ASCII and not, hash
// as hashtext does.
func TestPartitionHashAgreesWithPostgres(t *testing.T) {
	url := testenv.PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("abcXYZ019-_/:é€😀")
	keys := make([]string, 0, 500)
	for i := range 500 {
		r := make([]rune, i%65)
		for j := range r {
			r[j] = alphabet[rng.IntN(len(alphabet))]
		}
		keys = append(keys, string(r))
	}
	rows, err := conn.Query(ctx, `SELECT k, hashtext(k) & 2147483647 FROM unnest($1::text[]) AS k`, keys)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var k string
		var want int64
		if err := rows.Scan(&k, &want); err != nil {
			t.Fatal(err)
		}
		n++
		if got := partitionHash(k); int64(got) != want {
			t.Errorf("partitionHash(%q) = %d, PostgreSQL hashtext = %d", k, got, want)
		}
	}
	if err := rows.Err(); err != nil || n != len(keys) {
		t.Fatalf("compared %d of %d keys: %v", n, len(keys), err)
	}
	t.Logf("%d keys hash as PostgreSQL's hashtext", n)
}

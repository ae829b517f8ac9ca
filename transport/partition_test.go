package transport_test

import (
	"testing"

	"github.com/idemhq/idem/transport"
)

// The expected values are PostgreSQL 15's hashtext(key) & 2147483647, the
// partition pgstore stores: every transport puts a key in the same partition.
func TestPartitionHashIsPostgresHashtext(t *testing.T) {
	for key, want := range map[string]uint32{
		"":                            669664877,
		"a":                           1075015857,
		"key-17":                      455029860,
		"upload/Grüße-42":             1575737061,
		"0123456789ab":                710268555,
		"0123456789abcdefghijklmnopq": 440382357,
		"caf\u00e9":                   103771354,
		"cafe\u0301":                  1389184779,
	} {
		if got := transport.PartitionHash(key); got != want {
			t.Errorf("PartitionHash(%q) = %d, want %d", key, got, want)
		}
	}
}

// PartitionKey maps the NFC and NFD forms of a key to one string, even
// when NFC makes the key longer than its raw form.
func TestPartitionKeyTwins(t *testing.T) {
	for _, pair := range [][2]string{
		{"caf\u00e9", "cafe\u0301"},
		{"\uFB2C", "\u05E9\u05BC\u05C1"}, // NFC of U+FB2C is longer than U+FB2C
		{" k ", "k"},
	} {
		a := transport.PartitionKey(&transport.Envelope{ID: "id-a", CorrelationID: pair[0]})
		b := transport.PartitionKey(&transport.Envelope{ID: "id-b", CorrelationID: pair[1]})
		if a != b {
			t.Errorf("PartitionKey(%q) = %q, PartitionKey(%q) = %q: want one key", pair[0], a, pair[1], b)
		}
	}
	if got := transport.PartitionKey(&transport.Envelope{ID: "id"}); got != "id" {
		t.Errorf("PartitionKey without a correlation ID = %q, want the ID", got)
	}
	// A correlation ID that is no valid key is hashed as it is.
	for _, raw := range []string{"a\x00b", "a\xffb", " \t "} {
		if got := transport.PartitionKey(&transport.Envelope{ID: "id", CorrelationID: raw}); got != raw {
			t.Errorf("PartitionKey of the invalid key %q = %q, want it unchanged", raw, got)
		}
	}
}

// The NFC and NFD forms of a key, and the key with surrounding white space,
// share a partition: a saga's messages stay in one order whatever form
// their producers used. The raw forms hash apart, which is why the
// canonical key is hashed.
func TestPartitionOfTheCanonicalKey(t *testing.T) {
	nfc, nfd := "caf\u00e9", "cafe\u0301"
	if transport.PartitionHash(nfc) == transport.PartitionHash(nfd) {
		t.Fatalf("the raw forms hash alike; the test needs keys that do not")
	}
	key := func(correlationID, id string) string {
		return transport.PartitionKey(&transport.Envelope{ID: id, CorrelationID: correlationID})
	}
	for _, raw := range []string{nfd, " " + nfc + "\t", " " + nfd} {
		if got, want := transport.PartitionHash(key(raw, "id-1")), transport.PartitionHash(key(nfc, "id-2")); got != want {
			t.Errorf("hash of %q = %d, want %d, the hash of %q", raw, got, want, nfc)
		}
	}
	if got, want := transport.PartitionHash(key("", "msg-7")), transport.PartitionHash("msg-7"); got != want {
		t.Errorf("hash without a correlation ID = %d, want PartitionHash(ID) = %d", got, want)
	}
	for parts := 2; parts < 40; parts++ {
		if got, want := transport.PartitionOf(key(nfd, "x"), parts), int(transport.PartitionHash(nfc)%uint32(parts)); got != want {
			t.Errorf("PartitionOf(%q, %d) = %d, want %d", nfd, parts, got, want)
		}
	}
	for _, parts := range []int{1, 0, -3} {
		if got := transport.PartitionOf(key(nfd, "x"), parts); got != 0 {
			t.Errorf("PartitionOf with %d partitions = %d, want 0", parts, got)
		}
	}
}

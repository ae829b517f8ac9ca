package partition

import "testing"

// The expected values are PostgreSQL 15's hashtext(key) & 2147483647, the
// partition pgstore stores: every transport puts a key in the same partition.
func TestHashIsPostgresHashtext(t *testing.T) {
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
		if got := Hash(key); got != want {
			t.Errorf("Hash(%q) = %d, want %d", key, got, want)
		}
	}
}

// The NFC and NFD forms of a key, and the key with surrounding white space,
// share a partition: a saga's messages stay in one order whatever form
// their producers used. The raw forms hash apart, which is why the
// canonical key is hashed.
func TestOfHashesTheCanonicalKey(t *testing.T) {
	nfc, nfd := "caf\u00e9", "cafe\u0301"
	if Hash(nfc) == Hash(nfd) {
		t.Fatalf("the raw forms hash alike; the test needs keys that do not")
	}
	for _, raw := range []string{nfd, " " + nfc + "\t", " " + nfd} {
		if got, want := Of(raw, "id-1"), Of(nfc, "id-2"); got != want {
			t.Errorf("Of(%q) = %d, want %d, the hash of %q", raw, got, want, nfc)
		}
	}
	if got, want := Of("", "msg-7"), Hash("msg-7"); got != want {
		t.Errorf("Of without a correlation ID = %d, want Hash(ID) = %d", got, want)
	}
	for parts := 2; parts < 40; parts++ {
		if got, want := Index(nfd, "x", parts), int(Hash(nfc)%uint32(parts)); got != want {
			t.Errorf("Index(%q, %d) = %d, want %d", nfd, parts, got, want)
		}
	}
	if got := Index(nfd, "x", 1); got != 0 {
		t.Errorf("Index with one partition = %d, want 0", got)
	}
}

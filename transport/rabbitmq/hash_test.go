package rabbitmq

import "testing"

// The expected values are PostgreSQL 15's hashtext(key) & 2147483647, the
// partition pgstore stores: both transports put a key in the same partition.
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

package pgstore

import (
	"testing"

	"github.com/idemhq/idem/transport"
)

func TestPartitionKey(t *testing.T) {
	for _, tc := range []struct {
		name, corr, id, want string
	}{
		{"canonical key", "order-1", "m-1", "order-1"},
		{"NFD and white space", " cafe\u0301 ", "m-1", "caf\u00e9"},
		{"no correlation ID", "", "m-1", "m-1"},
		{"NUL", "a\x00b", "m-1", "ab"},
		{"not UTF-8", "a\xffb", "m-1", "ab"},
	} {
		if got := partitionKey(&transport.Envelope{ID: tc.id, CorrelationID: tc.corr}); got != tc.want {
			t.Errorf("%s: partitionKey(%q, %q): got %q, want %q", tc.name, tc.corr, tc.id, got, tc.want)
		}
	}
}

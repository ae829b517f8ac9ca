package admin

import (
	"testing"

	"github.com/idemhq/idem/store"
)

func TestCountText(t *testing.T) {
	for _, tc := range []struct {
		c    store.Count
		want string
	}{
		{store.Count{N: 0, Exact: true}, "0"},
		{store.Count{N: 999, Exact: true}, "999"},
		{store.Count{N: 1234, Exact: true}, "1,234"},
		{store.Count{N: 10000}, "more than 10,000"},
		{store.Count{N: 10000, Estimate: 1234567}, "more than 10,000 (about 1,234,567)"},
		{store.Count{N: 10000, Estimate: 9000}, "more than 10,000"}, // a stale estimate below the bound says nothing
	} {
		if got := countText(tc.c); got != tc.want {
			t.Errorf("countText(%+v): got %q, want %q", tc.c, got, tc.want)
		}
	}
}

package admin

import (
	"testing"

	"github.com/idemhq/idem/store/readmodel"
)

func TestCountText(t *testing.T) {
	for _, tc := range []struct {
		c    readmodel.Count
		want string
	}{
		{readmodel.Count{N: 0, Exact: true}, "0"},
		{readmodel.Count{N: 999, Exact: true}, "999"},
		{readmodel.Count{N: 1234, Exact: true}, "1,234"},
		{readmodel.Count{N: 10000}, "more than 10,000"},
		{readmodel.Count{N: 10000, Estimate: 1234567}, "more than 10,000 (about 1,234,567)"},
		{readmodel.Count{N: 10000, Estimate: 9000}, "more than 10,000"}, // a stale estimate below the bound says nothing
	} {
		if got := countText(tc.c); got != tc.want {
			t.Errorf("countText(%+v): got %q, want %q", tc.c, got, tc.want)
		}
	}
}

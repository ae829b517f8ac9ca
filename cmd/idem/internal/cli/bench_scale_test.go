package cli

import (
	"strings"
	"testing"
)

// TestBenchRefusesBadScaleFlags: bad --sagas, --inbox-rows and --finished
// values exit 2 with a message naming the flag, before any database work.
func TestBenchRefusesBadScaleFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sagas", "0"}, "--sagas"},
		{[]string{"--sagas", "1000,x"}, "--sagas"},
		{[]string{"--sagas", "1000", "--inbox-rows", "-1"}, "--inbox-rows"},
		{[]string{"--sagas", "1000,2000", "--inbox-rows", "5000"}, "one value per --sagas value"},
		{[]string{"--inbox-rows", "5000"}, "--inbox-rows needs --sagas"},
		{[]string{"--finished", "100"}, "--finished needs --sagas"},
		{[]string{"--sagas", "10", "--finished", "-3"}, "--finished"},
	} {
		args := append([]string{"bench", "--store", "postgres://u@127.0.0.1:1/db"}, tc.args...)
		code, _, errOut := run(t, args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message with %q", tc.args, code, errOut, tc.want)
		}
	}
}

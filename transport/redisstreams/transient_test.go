package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// redisError is a server error reply as go-redis returns it.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// A lost connection or a server still loading is waited out, wherever it
// sits in the error chain (Publish wraps and joins its XADDs' errors);
// everything else is returned at once.
func TestTransient(t *testing.T) {
	loading := redisError("LOADING Redis is loading the dataset in memory")
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{loading, true},
		{fmt.Errorf("XADD m1 to {ns}:p3: %w", loading), true},
		{errors.Join(errors.New("other"), fmt.Errorf("XADD m2: %w", loading)), true},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{io.EOF, true},
		{redisError("READONLY You can't write against a read only replica."), true},
		{redisError("BUSY Redis is busy running a script."), true},
		{redisError("OOM command not allowed when used memory > 'maxmemory'."), false},
		{redisError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{fmt.Errorf("publish: %w", context.Canceled), false},
		{redis.ErrClosed, false},
		{nil, false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

package inspect

import (
	"github.com/idemhq/idem/store/readmodel"
)

// ParseTimerCursor reads a cursor TimerCursor made, as the position
// readmodel.TimerQuerier pages from; nil for "" (the first page). Its error
// wraps ErrBadCursor and quotes s.
func ParseTimerCursor(s string) (*readmodel.TimerCursor, error) {
	t, err := timerAfter(s)
	if t == nil || err != nil {
		return nil, err
	}
	return readmodel.TimerCursorOf(t), nil
}

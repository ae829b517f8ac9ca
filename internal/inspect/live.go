package inspect

import "github.com/idemhq/idem/store"

// ParseTimerCursor reads a cursor TimerCursor made, as the position
// store.TimerQuerier pages from; nil for "" (the first page). Its error
// wraps ErrBadCursor and quotes s.
func ParseTimerCursor(s string) (*store.TimerCursor, error) {
	t, err := timerAfter(s)
	if t == nil || err != nil {
		return nil, err
	}
	return store.TimerCursorOf(t), nil
}

package inspect

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// Next-page cursors, as the admin API, the console and the CLI print and
// accept them: the unpadded base64url encoding of a small JSON object, so
// that a cursor is opaque and can be typed in a shell or put in a URL as it
// is. The stores' own cursors (store.ListParams.After) join fields with
// NUL bytes and never leave this package and the stores.

// ErrBadCursor is wrapped by the errors of a cursor that is not one this
// program printed.
var ErrBadCursor = errors.New("malformed cursor")

type instanceCursorJSON struct {
	T string    `json:"t"`
	K string    `json:"k"`
	U time.Time `json:"u,omitzero"`
}

type timerCursorJSON struct {
	D time.Time `json:"d"`
	T string    `json:"t"`
	K string    `json:"k"`
	N string    `json:"n"`
}

// InstanceCursor is the next-page cursor after in, for instance listings
// plain (store.Store.ListInstances) or filtered (Instances).
func InstanceCursor(in *store.Instance) string {
	return encodeCursor(instanceCursorJSON{T: in.SagaType, K: in.Key, U: in.UpdatedAt.UTC()})
}

// ParseInstanceCursor reads a cursor InstanceCursor made. Its error wraps
// ErrBadCursor and quotes s.
func ParseInstanceCursor(s string) (*readmodel.InstanceCursor, error) {
	var c instanceCursorJSON
	if err := decodeCursor(s, &c); err != nil {
		return nil, err
	}
	if c.T == "" || c.K == "" {
		return nil, badCursor(s)
	}
	return &readmodel.InstanceCursor{SagaType: c.T, Key: c.K, UpdatedAt: c.U}, nil
}

// ListAfter is the store.ListParams.After of store.Store.ListInstances
// that continues after c: saga type, NUL, key (accepted with and without
// a type filter).
func ListAfter(c *readmodel.InstanceCursor) string {
	return c.SagaType + "\x00" + c.Key
}

// TimerCursor is the next-page cursor of Timers after t.
func TimerCursor(t *store.Timer) string {
	return encodeCursor(timerCursorJSON{D: t.DueAt.UTC(), T: t.SagaType, K: t.Key, N: t.Name})
}

// timerListAfter is the store.ListParams.After of store.Store.ListTimers
// that continues after t.
func timerListAfter(t *store.Timer) string {
	return t.DueAt.UTC().Format(time.RFC3339Nano) + "\x00" + t.SagaType + "\x00" + t.Key + "\x00" + t.Name
}

// parseTimerCursor turns a cursor TimerCursor made into the store's form;
// "" stays "".
func parseTimerCursor(s string) (string, error) {
	t, err := timerAfter(s)
	if t == nil || err != nil {
		return "", err
	}
	return timerListAfter(t), nil
}

// timerAfter is the timer a cursor TimerCursor made names: nil for "" (the
// first page). Its error wraps ErrBadCursor and quotes s.
func timerAfter(s string) (*store.Timer, error) {
	if s == "" {
		return nil, nil
	}
	var c timerCursorJSON
	if err := decodeCursor(s, &c); err != nil {
		return nil, err
	}
	if c.D.IsZero() || c.T == "" || c.K == "" || c.N == "" {
		return nil, badCursor(s)
	}
	return &store.Timer{DueAt: c.D, SagaType: c.T, Key: c.K, Name: c.N}, nil
}

func encodeCursor(v any) string {
	b, _ := json.Marshal(v) // strings and times: cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, v) != nil {
		return badCursor(s)
	}
	return nil
}

func badCursor(s string) error {
	const max = 80
	if len(s) > max {
		s = s[:max] + "…"
	}
	return fmt.Errorf("%w %q: pass the next cursor of the previous page as it was printed", ErrBadCursor, strings.ToValidUTF8(s, "\uFFFD"))
}

package admin

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// History sums up a dead letter's replays in one line, as the console and
// the API show it: "" when it was never replayed, else "replayed N times"
// and what became of the latest replay, e.g. "replayed 2 times; failed
// again at 2026-01-02T15:04:05Z with unknown_type: …". A replay is pending
// until an engine consumes the message (succeeded) or dead-letters it
// again (failed).
func History(d *store.DeadLetter) string {
	r := d.LastReplay()
	if r == nil {
		return ""
	}
	n := "once"
	if len(d.Replays) > 1 {
		n = fmt.Sprintf("%d times", len(d.Replays))
	}
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch r.Outcome {
	case store.ReplayFailed:
		return fmt.Sprintf("replayed %s; failed again at %s with %s: %s", n, at(r.SettledAt), r.Reason, firstLine(r.Error))
	case store.ReplaySucceeded:
		return fmt.Sprintf("replayed %s; the last replay succeeded at %s: consumed without failing again", n, at(r.SettledAt))
	case store.ReplayNotSent:
		return fmt.Sprintf("replayed %s; the last replay was not sent at %s: %s", n, at(r.SettledAt), firstLine(r.Error))
	}
	return fmt.Sprintf("replayed %s; the last replay, at %s, is pending: re-queued, not yet consumed", n, at(r.At))
}

// replayRefused says why a replay of one dead letter was refused, or ""
// when it was not.
func replayRefused(err error) string {
	switch {
	case errors.Is(err, idem.ErrReplaySucceeded):
		return "its latest replay succeeded: replaying it again would run its message again; add force=true to replay it anyway"
	case errors.Is(err, store.ErrReplayPending):
		return "its latest replay is still pending: wait until an engine consumes it (its replays show the outcome)"
	}
	return ""
}

// firstLine is the first line of an error chain, shortened.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > 200 {
		return string(r[:200]) + "…"
	}
	return s
}

// Requeued is the answer of POST /api/dead-letters/{id}/replay: the
// message was re-queued, and its outcome is not known yet.
type Requeued struct {
	Requeued string `json:"requeued"`
	// Outcome is "pending": see the dead letter's replays.
	Outcome string `json:"outcome"`
	// See is where the outcome will show.
	See string `json:"see"`
}

func requeued(id string) Requeued {
	return Requeued{Requeued: id, Outcome: string(store.ReplayPending), See: "/api/dead-letters/" + url.PathEscape(id)}
}

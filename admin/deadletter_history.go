package admin

import (
	"errors"
	"net/url"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
)

// History sums up a dead letter's replays in one line, as the console and
// the API show it: "" when it was never replayed, else "replayed N times"
// and what became of the latest replay, e.g. "replayed 2 times; failed
// again at 2026-01-02T15:04:05Z with unknown_type: …". A replay is pending
// until an engine consumes the message (succeeded) or dead-letters it
// again (failed).
func History(d *store.DeadLetter) string { return inspect.History(d) }

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

package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
)

// ActorHeader is the request header an API caller may set to name who acts
// ("alice", "runbook-42"): the journal records "api: alice". At most 100
// bytes of printable UTF-8; anything else is refused.
const ActorHeader = "Idem-Actor"

// EndSagas is the body of POST /api/sagas/end?<filter>: it ends the active
// sagas the filter selects, once GET /api/sagas/select?<filter> counted
// them and answered Digest.
type EndSagas struct {
	Reason string `json:"reason"`
	// Digest is the selection's, as GET /api/sagas/select answered it: the
	// sagas counted that the filter still selects are ended, each at the
	// version counted; those that moved on are skipped (inspect.EndSagas).
	Digest string `json:"digest"`
}

// EndSaga is the body of POST /api/sagas/{type}/{key}/end.
type EndSaga struct {
	// Reason is required, at most 1,000 bytes: the journal keeps it.
	Reason string `json:"reason"`
	// Version, when set, ends the saga only if it is still at that version
	// (409 otherwise).
	Version int64 `json:"version,omitempty"`
}

// SendEvent is the body of POST /api/sagas/{type}/{key}/events: an event
// for the saga, which must correlate to it.
type SendEvent struct {
	// ID is the message ID; empty means a new random one. Sending again
	// with the same ID is safe: the saga applies it once.
	ID   string          `json:"id,omitempty"`
	Type string          `json:"type"`
	Body json.RawMessage `json:"body"`
}

// consoleActor names the console user for the journal: the session by a
// digest of its ID (never the ID itself, which is a credential).
func consoleActor(r *http.Request) string {
	sess := sessionOf(r)
	if sess == nil {
		return "console (loopback)"
	}
	sum := sha256.Sum256([]byte(sess.id))
	return "console session " + hex.EncodeToString(sum[:4])
}

// endError maps EndSaga's error to a status and a sentence; 0 for none.
func endError(k store.Key, err error) (int, string) {
	switch {
	case err == nil:
		return 0, ""
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound, fmt.Sprintf("no saga %s with key %q (it may have been swept)", k.SagaType, k.Key)
	case errors.Is(err, inspect.ErrFinished):
		return http.StatusConflict, fmt.Sprintf("saga %s/%q has finished already: there is nothing to end", k.SagaType, k.Key)
	case errors.Is(err, store.ErrConflict):
		return http.StatusConflict, fmt.Sprintf("saga %s/%q changed meanwhile: read it again, then end it", k.SagaType, k.Key)
	case errors.Is(err, inspect.ErrBadReason):
		return http.StatusBadRequest, err.Error()
	}
	return http.StatusInternalServerError, ""
}

// actionParams are the query parameters of an action's question, which the
// instance page's own links must not carry (a reason or a body in a URL
// reaches history and logs).
var actionParams = []string{"confirm", "reason", "version", "type", "body", "id"}

// actionsView is the instance page's actions card, with the question asked
// before an action when Confirm is set.
type actionsView struct {
	// Confirm is "end" or "send" while the page asks; "" otherwise.
	Confirm string
	// Reason, Type and Body are the form's values, carried to the question.
	Reason string
	Type   string
	Body   string
	// Events are the message types the saga's state accepts now, offered
	// first in the send form; Others the rest its machine takes.
	Events []string
	Others []string
	// Version and State are the saga's when the page was read: an end is
	// refused if the saga moved on since. Moved says it moved on since the
	// operator pressed End (the question shows it as it is now).
	Version  int64
	State    string
	Moved    bool
	Finished bool
	// ID is the message ID the question about a send carries.
	ID string
}

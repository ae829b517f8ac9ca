package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// parts is what the API and the console share: the engine, its store and
// what the store can do, and the server's configuration. Its methods are
// the operations both serve (sagas.go, deadletters.go, retries.go,
// schedules.go, replicas.go, overview.go, history.go).
type parts struct {
	e       *idem.Engine
	st      store.Store
	caps    *capabilities // capabilities.go
	log     *slog.Logger
	mux     *http.ServeMux
	token   [sha256.Size]byte
	auth    bool
	maxBody int64
	timeout time.Duration
	// readOnly hides the console's mutating controls and refuses the
	// API's mutating requests.
	readOnly bool
	sessions *sessions    // console_session.go; its limit of failed logins guards the API's token too
	rates    *rateSampler // the overview's rates
	charts   *charts      // console_charts.go
}

// api serves the JSON API under /api/, authorized by the bearer token.
type api struct{ *parts }

// console serves the console's HTML pages and their forms, authorized by
// a login session.
type console struct{ *parts }

// storeCtx bounds the store calls of r by Config.StoreTimeout.
func (p *parts) storeCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), p.timeout)
}

// internalError logs err and answers 500 (or 503 when the store timed out)
// without the error's text, which may name hosts or paths. A mark the
// store refused (readmodel.ErrBadMark) is the caller's error: 400, not logged.
func (p *parts) internalError(w http.ResponseWriter, r *http.Request, op string, err error) {
	if errors.Is(err, readmodel.ErrBadMark) {
		writeError(w, http.StatusBadRequest, "%s: as_of is not a mark this store made: pass the as_of a count returned (GET /api/dead-letters/counts)", op)
		return
	}
	p.log.ErrorContext(r.Context(), "admin: "+op, "error", err, "method", r.Method, "path", r.URL.Path)
	if errors.Is(err, context.DeadlineExceeded) {
		writeError(w, http.StatusServiceUnavailable, "%s: the store did not answer in time: retry later; see the server log", op)
		return
	}
	writeError(w, http.StatusInternalServerError, "%s failed: see the server log for the cause, then retry", op)
}

// authorize requires the bearer token when one is configured.
func (p *parts) authorize(h http.Handler) http.Handler {
	if !p.auth {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A guess is limited (see limit.go); a request without a
		// token is none.
		tried := r.Header.Get("Authorization") != ""
		if tried {
			if secs, refused := p.limited(w, r); refused {
				writeError(w, http.StatusTooManyRequests, "too many wrong admin tokens: retry after %d s", secs)
				return
			}
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		// Hashing both sides first makes the comparison constant-time in
		// the token's length too.
		sum := sha256.Sum256([]byte(got))
		if subtle.ConstantTimeCompare(sum[:], p.token[:]) != 1 || !ok {
			if tried {
				p.wrongToken(r)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="idem"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong admin token: send the header Authorization: Bearer <IDEM_ADMIN_TOKEN>")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// writable refuses h in read-only mode.
func (p *parts) writable(h http.Handler) http.Handler {
	if !p.readOnly {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "this admin server is read-only (admin.Config.ReadOnly, idem serve --read-only): change nothing here, or restart it without read-only")
	})
}

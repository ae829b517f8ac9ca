package admin_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemhq/idem/admin"
)

// A state the API does not know is the caller's mistake: 400 naming the
// parameter, never a 500.
func TestAPIUnknownStateIsBadRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	for _, path := range []string{"/api/dead-letters?state=bogus", "/api/dead-letters/counts?state=bogus", "/api/sagas/select?type=order&state=bogus"} {
		code, body := b.do(t, http.MethodGet, path, "")
		if code >= 500 {
			t.Errorf("GET %s: %d %s, want a 4xx", path, code, body)
		}
		if path != "/api/sagas/select?type=order&state=bogus" && (code != http.StatusBadRequest || !strings.Contains(body, "state")) {
			t.Errorf("GET %s: %d %s, want 400 naming the state", path, code, body)
		}
	}
}

// A key holding U+FFFD (what invalid UTF-8 decodes to) is refused for
// that, not called a control character.
func TestAPIReplacementCharInKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	code, body := b.do(t, http.MethodGet, "/api/sagas/order/"+url.PathEscape("o-\ufffd"), "")
	if strings.Contains(body, "control character") {
		t.Errorf("GET a key with U+FFFD: %d %s, want it not called a control character", code, body)
	}
}

// A token shorter than admin.MinTokenLen is refused at start-up, saying
// what to change.
func TestShortTokenRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := admin.New(b.e, b.st, &admin.Config{Token: "short-token"})
	if err == nil || !strings.Contains(err.Error(), "at least 16 bytes") || !strings.Contains(err.Error(), "11 bytes") {
		t.Errorf("admin.New with an 11-byte token: %v, want a refusal asking for at least 16 bytes", err)
	}
	if _, err := admin.New(b.e, b.st, &admin.Config{Token: "sixteen-bytes-ok"}); err != nil {
		t.Errorf("admin.New with a 16-byte token: %v", err)
	}
}

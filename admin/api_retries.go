package admin

import (
	"fmt"
	"net/http"

	"github.com/idemhq/idem/store"
)

// RetryList is the answer of GET /api/sagas/{type}/{key}/retries: the
// saga's messages being retried, ordered by first failure, at most
// store.MaxRetriesOf.
type RetryList struct {
	Retries []store.Retry `json:"retries"`
}

// apiRetries lists the retry state of a saga's messages. The saga need
// not exist: a message that would start it may be the one failing.
func (s *api) apiRetries(w http.ResponseWriter, r *http.Request) {
	typ, raw := r.PathValue("type"), r.PathValue("key")
	key, err := canonKey(raw, s.e.MaxKeyLen())
	if err != nil {
		writeError(w, http.StatusBadRequest, "saga key %q is not a valid key (%v): path-escape the key as it appears in GET /api/sagas", raw, err)
		return
	}
	if s.caps.retries == nil {
		writeError(w, http.StatusNotImplemented, "store %T keeps no retry state", s.st)
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	rs, err := s.retriesOf(ctx, store.Key{SagaType: typ, Key: key})
	if err != nil {
		s.internalError(w, r, fmt.Sprintf("read the retries of saga %s/%s", typ, key), err)
		return
	}
	if rs == nil {
		rs = []store.Retry{}
	}
	writeJSON(w, http.StatusOK, RetryList{Retries: rs})
}

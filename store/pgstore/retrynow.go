package pgstore

import (
	"fmt"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
)

// encodeRetryEnvelope splits r's envelope into the metadata and body
// columns; both nil (NULL) when r has none.
func encodeRetryEnvelope(r *store.Retry) (*string, []byte, error) {
	if r.Envelope == nil {
		return nil, nil, nil
	}
	meta, body, err := sqlq.EncodeEnvelope(*r.Envelope)
	if err != nil {
		return nil, nil, fmt.Errorf("envelope: %w", err)
	}
	return &meta, body, nil
}

// decodeRetryEnvelope sets r's envelope from its columns; a NULL one
// (recorded before migration 019) leaves it nil.
func decodeRetryEnvelope(r *store.Retry, meta, body []byte) error {
	if meta == nil {
		return nil
	}
	env, err := sqlq.DecodeEnvelope(meta, body)
	if err != nil {
		return fmt.Errorf("retry %q: %w", r.ID, err)
	}
	r.Envelope = &env
	return nil
}

package sqlitestore

import (
	"database/sql"
	"fmt"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
)

// encodeRetryEnvelope splits r's envelope into the metadata and body
// columns; both NULL when r has none.
func encodeRetryEnvelope(r *store.Retry) (sql.NullString, []byte, error) {
	if r.Envelope == nil {
		return sql.NullString{}, nil, nil
	}
	meta, body, err := sqlq.EncodeEnvelope(*r.Envelope)
	if err != nil {
		return sql.NullString{}, nil, fmt.Errorf("envelope: %w", err)
	}
	return sql.NullString{String: meta, Valid: true}, body, nil
}

// decodeRetryEnvelope sets r's envelope from its columns; a NULL one
// (recorded before migration 014) leaves it nil.
func decodeRetryEnvelope(r *store.Retry, meta sql.NullString, body []byte) error {
	if !meta.Valid {
		return nil
	}
	env, err := sqlq.DecodeEnvelope([]byte(meta.String), body)
	if err != nil {
		return fmt.Errorf("retry %q: %w", r.ID, err)
	}
	r.Envelope = &env
	return nil
}

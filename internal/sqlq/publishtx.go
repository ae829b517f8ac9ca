package sqlq

import (
	"fmt"
	"slices"
	"time"

	"github.com/idemhq/idem/transport"
)

// PrepareTx validates envelopes published in an application's transaction
// as the stores' Publish and Engine.Publish do (a transport.FieldError
// names a refused field, a missing ID or type included), and returns copies whose zero SentAt is now.
func PrepareTx(pkg string, envs []transport.Envelope, now time.Time) ([]transport.Envelope, error) {
	envs = slices.Clone(envs)
	for i := range envs {
		switch {
		case envs[i].ID == "":
			return nil, fmt.Errorf("%s: publish envelope %d: %w", pkg, i, &transport.FieldError{Field: transport.FieldID, Problem: "required"})
		case envs[i].Type == "":
			return nil, fmt.Errorf("%s: publish envelope %d: %w", pkg, i, &transport.FieldError{Field: transport.FieldType, Problem: "required"})
		}
		if err := transport.ValidateEnvelope(&envs[i]); err != nil {
			return nil, fmt.Errorf("%s: publish envelope %d: %w", pkg, i, err)
		}
		if err := transport.ValidateFairness(&envs[i]); err != nil {
			return nil, fmt.Errorf("%s: publish envelope %d: %w", pkg, i, err)
		}
		if _, ok := envs[i].Headers[transport.HeaderToken]; ok {
			// No token is minted here: a consumer would take the message
			// for a duplicate whose token was claimed, and drop it.
			return nil, fmt.Errorf("%s: publish envelope %d: %w", pkg, i, &transport.FieldError{Field: transport.FieldHeader, Problem: "header " + transport.HeaderToken + " is set by Engine.PublishWithTokens only"})
		}
		if envs[i].SentAt.IsZero() {
			envs[i].SentAt = now
		}
	}
	return envs, nil
}

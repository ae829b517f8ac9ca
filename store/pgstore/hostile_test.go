package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// Hostile envelope fields and a state holding U+0000 end as dead letters
// with named reasons on PostgreSQL too, instead of being retried forever.
func TestHostileInputIsDeadLettered(t *testing.T) {
	t.Parallel()
	enginetest.HostileInput(t, func(t *testing.T) store.Store { return openStore(t, pgstore.Config{}) })
}

// Publishing to the queue refuses a field PostgreSQL cannot keep, naming
// the field, instead of failing with an SQLSTATE.
func TestPublishRefusesHostileFields(t *testing.T) {
	t.Parallel()
	st := openStore(t, pgstore.Config{})
	for _, c := range enginetest.HostileEnvelopes() {
		if c.Env.CorrelationID == "" && c.Env.CausationID == "" && c.Env.Headers == nil && c.Env.IdempotencyKey == "" &&
			c.Env.ID == "" {
			continue
		}
		err := st.Publish(context.Background(), []transport.Envelope{c.Env})
		var fe *transport.FieldError
		if c.Name == "NUL in the saga key" {
			if err != nil {
				t.Errorf("%s: Publish: %v, want it queued (the consumer dead-letters it)", c.Name, err)
			}
			continue
		}
		if !errors.As(err, &fe) {
			t.Errorf("%s: Publish error %v, want a transport.FieldError", c.Name, err)
		}
	}
}

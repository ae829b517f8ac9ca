package transport_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem/transport"
)

func TestValidateEnvelope(t *testing.T) {
	ok := transport.Envelope{ID: "a <script>é", Type: "orders.Placed", CorrelationID: "k\twith tab", CausationID: "c",
		IdempotencyKey: "sha256:ab", Headers: map[string]string{"traceparent": "00-abc-01", "x": "line\nbreak"}}
	if err := transport.ValidateEnvelope(&ok); err != nil {
		t.Fatalf("valid envelope refused: %v", err)
	}
	for _, tc := range []struct {
		name, field string
		edit        func(*transport.Envelope)
	}{
		{"NUL in ID", transport.FieldID, func(e *transport.Envelope) { e.ID = "a\x00" }},
		{"tab in ID", transport.FieldID, func(e *transport.Envelope) { e.ID = "a\tb" }},
		{"invalid UTF-8 in idempotency key", transport.FieldIdempotencyKey, func(e *transport.Envelope) { e.IdempotencyKey = "\xff" }},
		{"DEL in type", transport.FieldType, func(e *transport.Envelope) { e.Type = "a\x7f" }},
		{"long type", transport.FieldType, func(e *transport.Envelope) { e.Type = strings.Repeat("t", transport.MaxTypeBytes+1) }},
		{"NUL in correlation ID", transport.FieldCorrelationID, func(e *transport.Envelope) { e.CorrelationID = "\x00" }},
		{"long causation ID", transport.FieldCausationID, func(e *transport.Envelope) { e.CausationID = strings.Repeat("c", transport.MaxMetaBytes+1) }},
		{"empty header name", transport.FieldHeader, func(e *transport.Envelope) { e.Headers = map[string]string{"": "v"} }},
		{"NUL in header value", transport.FieldHeader, func(e *transport.Envelope) { e.Headers = map[string]string{"h": "\x00"} }},
		{"headers too large", transport.FieldHeader, func(e *transport.Envelope) {
			e.Headers = map[string]string{"h": strings.Repeat("v", transport.MaxHeaderBytes)}
		}},
	} {
		env := ok.Clone()
		tc.edit(&env)
		err := transport.ValidateEnvelope(&env)
		var fe *transport.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: got %v, want a FieldError for %s", tc.name, err, tc.field)
		}
	}
}

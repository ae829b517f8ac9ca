package transport

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Limits ValidateEnvelope enforces on an envelope's metadata. The body is
// bounded by the engine's Config.MaxBodyBytes, not here.
const (
	// MaxTypeBytes bounds Envelope.Type.
	MaxTypeBytes = 256
	// MaxHeaderNameBytes bounds one header name.
	MaxHeaderNameBytes = 256
	// MaxHeaderBytes bounds all header names and values together.
	MaxHeaderBytes = 16 << 10
	// MaxMetaBytes bounds the correlation and causation IDs.
	MaxMetaBytes = 4 << 10
)

// Envelope fields named by FieldError.
const (
	FieldID             = "id"
	FieldIdempotencyKey = "idempotency_key"
	FieldType           = "type"
	FieldCorrelationID  = "correlation_id"
	FieldCausationID    = "causation_id"
	FieldHeader         = "header"
)

// FieldError reports an envelope field that no store or transport can be
// trusted to carry faithfully: PostgreSQL refuses U+0000 and invalid UTF-8
// in text, brokers refuse control characters in IDs, and so on.
type FieldError struct {
	// Field is one of the Field constants.
	Field string
	// Problem says what is wrong, with the offending value quoted.
	Problem string
}

func (e *FieldError) Error() string { return "envelope " + e.Field + ": " + e.Problem }

// ValidateEnvelope checks every metadata field of env against the rules
// every Idem store and transport can carry:
//
//   - ID, IdempotencyKey and Type are valid UTF-8 without control
//     characters (U+0000 included); Type is at most MaxTypeBytes;
//   - CorrelationID and CausationID are valid UTF-8 without U+0000, at most
//     MaxMetaBytes;
//   - header names are non-empty valid UTF-8 without control characters,
//     at most MaxHeaderNameBytes; values are valid UTF-8 without U+0000;
//     names and values together are at most MaxHeaderBytes.
//
// It does not require ID or Type (an envelope without them is refused
// elsewhere with its own reason), and it does not look at the body. The
// error is a *FieldError naming the first field that breaks a rule.
func ValidateEnvelope(env *Envelope) error {
	for _, f := range []struct{ name, v string }{{FieldID, env.ID}, {FieldIdempotencyKey, env.IdempotencyKey}, {FieldType, env.Type}} {
		if p := strictText(f.v); p != "" {
			return &FieldError{Field: f.name, Problem: fmt.Sprintf("%q %s", f.v, p)}
		}
	}
	if len(env.Type) > MaxTypeBytes {
		return &FieldError{Field: FieldType, Problem: fmt.Sprintf("%d bytes, over the limit of %d", len(env.Type), MaxTypeBytes)}
	}
	for _, f := range []struct{ name, v string }{{FieldCorrelationID, env.CorrelationID}, {FieldCausationID, env.CausationID}} {
		if p := looseText(f.v); p != "" {
			return &FieldError{Field: f.name, Problem: fmt.Sprintf("%q %s", f.v, p)}
		}
		if len(f.v) > MaxMetaBytes {
			return &FieldError{Field: f.name, Problem: fmt.Sprintf("%d bytes, over the limit of %d", len(f.v), MaxMetaBytes)}
		}
	}
	total := 0
	for k, v := range env.Headers {
		switch p := strictText(k); {
		case k == "":
			return &FieldError{Field: FieldHeader, Problem: "empty header name"}
		case p != "":
			return &FieldError{Field: FieldHeader, Problem: fmt.Sprintf("name %q %s", k, p)}
		case len(k) > MaxHeaderNameBytes:
			return &FieldError{Field: FieldHeader, Problem: fmt.Sprintf("name of %d bytes, over the limit of %d", len(k), MaxHeaderNameBytes)}
		}
		if p := looseText(v); p != "" {
			return &FieldError{Field: FieldHeader, Problem: fmt.Sprintf("%s value %q %s", k, v, p)}
		}
		total += len(k) + len(v)
	}
	if total > MaxHeaderBytes {
		return &FieldError{Field: FieldHeader, Problem: fmt.Sprintf("headers of %d bytes, over the limit of %d", total, MaxHeaderBytes)}
	}
	return nil
}

// strictText describes what makes s unfit for an identifier, or "".
func strictText(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Sprintf("has a control character (%U) at byte %d", r, i)
		}
	}
	return ""
}

// looseText describes what makes s unfit for free text, or "".
func looseText(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return fmt.Sprintf("has U+0000 at byte %d", i)
		}
	}
	return ""
}

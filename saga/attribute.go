package saga

import (
	"errors"
	"fmt"

	"github.com/idemhq/idem/canon"
)

// ErrAttribute is wrapped by Apply when an attribute function returns a
// value that cannot be stored: invalid UTF-8, a control character (U+0000
// included), or longer than 256 bytes once canonical. Trying again computes the same value, so the
// engine dead-letters the message (reason "invalid_attribute").
var ErrAttribute = errors.New("invalid attribute")

type attribute[S any] struct {
	name string
	fn   func(S) string
}

// Attribute declares a searchable attribute of the saga's state: after each
// transition, fn computes its value from the new state, and the store keeps
// it with the instance, in the same commit, where operations tools can
// search it (idem sagas ls --attr name=value, the console, the admin API).
// An empty value means the instance has no such attribute. Values are
// stored and compared in Unicode NFC form.
//
// The name must be 1 to 64 ASCII letters, digits, '_', '-' or '.',
// starting with a letter, and unique in the machine; Attribute panics
// otherwise. An instance gets an attribute declared later at its next
// transition. fn must be pure and fast; a panic in it fails the message
// like a panic in a handler.
func (m *Machine[S]) Attribute(name string, fn func(S) string) {
	if err := canon.AttributeName(name); err != nil {
		panic(fmt.Sprintf("saga %s: %v", m.name, err))
	}
	for _, a := range m.attributes {
		if a.name == name {
			panic(fmt.Sprintf("saga %s: attribute %q declared twice", m.name, name))
		}
	}
	if fn == nil {
		panic(fmt.Sprintf("saga %s: attribute %q has no function", m.name, name))
	}
	m.attributes = append(m.attributes, attribute[S]{name: name, fn: fn})
}

// Attributes returns the names of the declared attributes in declaration
// order.
func (m *Machine[S]) Attributes() []string {
	names := make([]string, len(m.attributes))
	for i, a := range m.attributes {
		names[i] = a.name
	}
	return names
}

// attributeValues computes the canonical attribute values of data; nil when
// the machine declares none or every value is empty.
func (m *Machine[S]) attributeValues(data *S) (map[string]string, error) {
	var out map[string]string
	for _, a := range m.attributes {
		v, err := canon.AttributeValue(a.fn(*data))
		if err != nil {
			return nil, fmt.Errorf("saga %s: attribute %q: %w: %w", m.name, a.name, ErrAttribute, err)
		}
		if v == "" {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(m.attributes))
		}
		out[a.name] = v
	}
	return out, nil
}

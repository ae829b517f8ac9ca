package inspect

import (
	"fmt"
	"slices"
	"strings"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/store"
)

// ParseAttributes reads attribute filters written name=value (the CLI's
// --attr, the API's attr parameter, the console's field) into the map of
// readmodel.InstanceQuery.Attributes, values in NFC. Every filter must match,
// so naming one attribute twice with different values is refused, as are
// an invalid name and a value that no attribute can hold, with an error
// that says which.
func ParseAttributes(specs []string) (map[string]string, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(specs))
	for _, spec := range specs {
		name, value, ok := strings.Cut(spec, "=")
		if !ok {
			return nil, fmt.Errorf("attribute filter %q: want name=value, for example supplier=acme", spec)
		}
		if err := canon.AttributeName(name); err != nil {
			return nil, fmt.Errorf("attribute filter %q: %w", spec, err)
		}
		v, err := canon.AttributeValue(value)
		if err != nil {
			return nil, fmt.Errorf("attribute filter %q: %w", spec, err)
		}
		if v == "" {
			return nil, fmt.Errorf("attribute filter %q: empty value (an instance without the attribute has none to match)", spec)
		}
		if prev, dup := out[name]; dup && prev != v {
			return nil, fmt.Errorf("attribute filter %q: %s is already filtered on %q, and filters are ANDed", spec, name, prev)
		}
		out[name] = v
	}
	return out, nil
}

// FormatAttributes writes attrs as name=value pairs in name order, joined
// by sep.
func FormatAttributes(attrs map[string]string, sep string) string {
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(n + "=" + attrs[n])
	}
	return b.String()
}

// hasAttributes reports whether in has every attribute of attrs
// (canonical, from canon.AttributeFilter).
func hasAttributes(in *store.Instance, attrs map[string]string) bool {
	for name, v := range attrs {
		if got, ok := in.Attributes[name]; !ok || got != v {
			return false
		}
	}
	return true
}

// Package canon forwards to the public package
// github.com/idemhq/idem/canon, where key and attribute canonicalisation
// now live, so that the root package compiles unchanged while it is
// restructured. Nothing new should import it: use package canon (and
// transport.PartitionKey for the partition key). Delete it once the root
// imports the public package.
package canon

import "github.com/idemhq/idem/canon"

// DefaultMaxLen is canon.DefaultMaxLen.
const DefaultMaxLen = canon.DefaultMaxLen

// MaxAttributeBytes and MaxAttributeName are canon's limits.
const (
	MaxAttributeBytes = canon.MaxAttributeBytes
	MaxAttributeName  = canon.MaxAttributeName
)

// The errors are canon's own values, so errors.Is matches either name.
var (
	ErrEmpty          = canon.ErrEmpty
	ErrTooLong        = canon.ErrTooLong
	ErrControl        = canon.ErrControl
	ErrEncoding       = canon.ErrEncoding
	ErrAttributeValue = canon.ErrAttributeValue
	ErrAttributeName  = canon.ErrAttributeName
)

// Key is canon.Key.
func Key(raw string, maxLen int) (string, error) { return canon.Key(raw, maxLen) }

// Lookup is canon.Lookup.
func Lookup(raw string) string { return canon.Lookup(raw) }

// Prefix is canon.Prefix.
func Prefix(raw string) string { return canon.Prefix(raw) }

// AttributeValue is canon.AttributeValue.
func AttributeValue(v string) (string, error) { return canon.AttributeValue(v) }

// AttributeName is canon.AttributeName.
func AttributeName(name string) error { return canon.AttributeName(name) }

// AttributeFilter is canon.AttributeFilter.
func AttributeFilter(attrs map[string]string) (map[string]string, bool) {
	return canon.AttributeFilter(attrs)
}

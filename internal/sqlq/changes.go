package sqlq

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemhq/idem/store"
)

// CheckWrites refuses the instance writes no commit may hold, before any
// statement runs: a nil instance or an insert whose version is not 1 (a
// caller's bug, which retrying cannot fix), and a second write of one
// instance in one commit, which wraps store.ErrConflict as memstore reports
// it. SQL would otherwise accept an insert followed by an update of the same
// row.
func CheckWrites(c *store.Changes) error {
	seen := make(map[store.Key]bool, len(c.Inserts)+len(c.Updates))
	for _, in := range c.Inserts {
		if in == nil {
			return errors.New("nil instance in Changes.Inserts")
		}
		if in.Version != 1 {
			return fmt.Errorf("insert %s/%s with version %d: new instances have version 1", in.SagaType, in.Key, in.Version)
		}
		k := store.Key{SagaType: in.SagaType, Key: in.Key}
		if seen[k] {
			return fmt.Errorf("%w: %s/%s is inserted twice in one commit", store.ErrConflict, in.SagaType, in.Key)
		}
		seen[k] = true
	}
	for _, in := range c.Updates {
		if in == nil {
			return errors.New("nil instance in Changes.Updates")
		}
		k := store.Key{SagaType: in.SagaType, Key: in.Key}
		if seen[k] {
			return fmt.Errorf("%w: %s/%s is written twice in one commit", store.ErrConflict, in.SagaType, in.Key)
		}
		seen[k] = true
	}
	return nil
}

// AttributesJSON encodes an instance's attributes as the JSON object the
// SQL stores keep in idem_instances.attributes (keys sorted, so that equal
// sets encode equally), or nil when there are none.
func AttributesJSON(attrs map[string]string) (*string, error) {
	if len(attrs) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(attrs)
	if err != nil {
		return nil, fmt.Errorf("encode attributes: %w", err)
	}
	s := string(b)
	return &s, nil
}

// DecodeAttributes decodes what AttributesJSON encoded; nil or "null" is no
// attributes.
func DecodeAttributes(b []byte) (map[string]string, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode attributes: %w", err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

package sqlq

import (
	"encoding/json"
	"fmt"
)

// ReplicaConfigJSON encodes a replica's configuration summary as the JSON
// object the SQL stores keep in idem_replicas.config ("{}" when empty).
// Invalid UTF-8 becomes U+FFFD and U+0000 an escape, so any text column
// takes it.
func ReplicaConfigJSON(c map[string]string) (string, error) {
	if len(c) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encode replica config: %w", err)
	}
	return string(b), nil
}

// DecodeReplicaConfig decodes what ReplicaConfigJSON encoded; an empty
// object is nil.
func DecodeReplicaConfig(b []byte) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode replica config: %w", err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

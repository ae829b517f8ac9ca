package helix

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/idemhq/idem/canon"
)

// CanonicalID returns the canonical form of a raw sample ID, the saga key
// the engine files it under (Unicode NFC, as package canon defines it), or
// an error naming what is wrong with it (empty, a control character such
// as NUL, invalid UTF-8, too long).
func CanonicalID(raw string) (string, error) {
	k, err := canon.Key(raw, 0)
	if err != nil {
		return "", fmt.Errorf("helixqueue: sample ID %q: %w", raw, err)
	}
	return k, nil
}

// hashHex names raw bytes in an envelope ID (which must not carry the
// sample ID itself: it may hold any Unicode).
func hashHex(raw string) string {
	h := sha256.Sum256([]byte(raw))
	return hex.EncodeToString(h[:16])
}

func decodeBatch(data []byte) (Batch, error) {
	var b Batch
	if len(data) == 0 {
		return b, nil
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return b, fmt.Errorf("helixqueue: decode batch: %w", err)
	}
	return b, nil
}

package inspect

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// digester hashes a selection for a batch action to bind its
// confirmation to: each field length-prefixed, so that no two selections
// hash the same fields alike.
type digester struct {
	h hash.Hash
	n [8]byte
}

func newDigester() *digester { return &digester{h: sha256.New()} }

// str adds s, length-prefixed.
func (d *digester) str(s string) {
	binary.BigEndian.PutUint64(d.n[:], uint64(len(s)))
	d.h.Write(d.n[:])
	d.h.Write([]byte(s))
}

// num adds v.
func (d *digester) num(v int64) {
	binary.BigEndian.PutUint64(d.n[:], uint64(v))
	d.h.Write(d.n[:])
}

// sum is the digest: printable ASCII, to pass back with the action.
func (d *digester) sum() string { return hex.EncodeToString(d.h.Sum(nil)[:16]) }

// selectionPrefix starts a batch selection's digest (its format's version).
const selectionPrefix = "s2."

// keyDigest is the first 16 bytes of the SHA-256 of a saga's key: wide
// enough that nobody who picks saga keys (they come from message bodies)
// can make two collide, so that a digest never names a saga not counted.
type keyDigest [16]byte

// encodeSelection is a selection's digest: selectionPrefix, then base64url
// of the filter's hash (8 bytes) and, for each saga, its key's digest (16
// bytes) and its version (uvarint). It binds a confirmation to the filter
// and to which sagas were counted at which version, without their keys.
func encodeSelection(q *readmodel.InstanceQuery, sagas []SagaVersion) string {
	b := make([]byte, 0, 8+len(sagas)*18)
	b = binary.BigEndian.AppendUint64(b, filterHash(q))
	for _, s := range sagas {
		k := keyHash(s.Key)
		b = append(b, k[:]...)
		b = binary.AppendUvarint(b, uint64(s.Version))
	}
	return selectionPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// decodeSelection reads a digest encodeSelection made for q: the versions
// counted by key digest. It fails wrapping ErrSetChanged when the digest is
// not one (a key named twice included), or is one of another filter.
func decodeSelection(q *readmodel.InstanceQuery, digest string) (map[keyDigest]int64, error) {
	raw, ok := strings.CutPrefix(digest, selectionPrefix)
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if !ok || err != nil || len(b) < 8 {
		return nil, fmt.Errorf("%w: it is not a count this version made", ErrSetChanged)
	}
	if binary.BigEndian.Uint64(b) != filterHash(q) {
		return nil, fmt.Errorf("%w: it was counted for another filter", ErrSetChanged)
	}
	out := map[keyDigest]int64{}
	for b = b[8:]; len(b) > 0; {
		var k keyDigest
		if len(b) < len(k)+1 {
			return nil, fmt.Errorf("%w: it is cut short", ErrSetChanged)
		}
		copy(k[:], b)
		v, n := binary.Uvarint(b[len(k):])
		if _, twice := out[k]; twice || n <= 0 || len(out) == MaxBatch {
			return nil, fmt.Errorf("%w: it is not a count this version made", ErrSetChanged)
		}
		out[k] = int64(v)
		b = b[len(k)+n:]
	}
	return out, nil
}

// keyHash is a saga key's keyDigest.
func keyHash(k store.Key) keyDigest {
	d := newDigester()
	d.str(k.SagaType)
	d.str(k.Key)
	return keyDigest(d.h.Sum(nil)[:16])
}

// filterHash hashes the fields of q that select sagas and their order (not
// its cursors or limit).
func filterHash(q *readmodel.InstanceQuery) uint64 {
	d := newDigester()
	for _, s := range []string{q.SagaType, q.State, q.KeyPrefix, q.UpdatedFrom.Format(time.RFC3339Nano), q.UpdatedBefore.Format(time.RFC3339Nano)} {
		d.str(s)
	}
	for _, name := range slices.Sorted(maps.Keys(q.Attributes)) {
		d.str(name)
		d.str(q.Attributes[name])
	}
	if q.Stuck {
		d.str("stuck")
	}
	return binary.BigEndian.Uint64(d.h.Sum(nil))
}

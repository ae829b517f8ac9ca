package transport_test

import (
	"fmt"
	"testing"

	"github.com/idemhq/idem/transport"
)

// ShareOf splits the hashes into equal ranges, with the bounds SQL's
// integer division gives (pgstore reads a share as a range of its part
// column): every key's share holds its hash, and the shares are near
// equal.
func TestShareOfIsARangeOfTheHash(t *testing.T) {
	for _, parts := range []int{2, 3, 7, 16, 100} {
		count := make([]int, parts)
		for i := range 20000 {
			key := fmt.Sprintf("key-%d", i)
			s := transport.ShareOf(key, parts)
			h := int64(transport.PartitionHash(key))
			lo, hi := int64(s)*(1<<31)/int64(parts), int64(s+1)*(1<<31)/int64(parts)
			if s < 0 || s >= parts || h < lo || h >= hi {
				t.Fatalf("ShareOf(%q, %d) = %d: hash %d outside [%d, %d)", key, parts, s, h, lo, hi)
			}
			count[s]++
		}
		for s, n := range count {
			if want := 20000 / parts; n < want*7/10 || n > want*13/10 {
				t.Errorf("%d shares: share %d holds %d of 20000 keys, want about %d", parts, s, n, want)
			}
		}
	}
	if transport.ShareOf("x", 1) != 0 || transport.ShareOf("x", 0) != 0 {
		t.Error("one share is share 0")
	}
}

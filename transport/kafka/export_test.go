package kafka

import (
	"strconv"
	"strings"

	"github.com/idemhq/idem/transport"
)

// SetDrainHooks makes t call started when a revoke begins draining
// partitions and done when it has committed and forgotten them.
func SetDrainHooks(t *Transport, started, done func(ps []int32)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onDrain, t.drained = started, done
}

// PartitionOffset returns the Kafka partition and offset of d's record.
func PartitionOffset(d transport.Delivery) (int32, int64) {
	f := strings.Split(d.Token, "/")
	p, _ := strconv.ParseInt(f[0], 10, 32)
	o, _ := strconv.ParseInt(f[1], 10, 64)
	return int32(p), o
}

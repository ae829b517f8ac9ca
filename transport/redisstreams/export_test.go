package redisstreams

import (
	"context"
	"time"
)

// ForgetIdle runs the janitor's deletion of idle consumers once.
func (t *Transport) ForgetIdle(ctx context.Context, idle time.Duration) (int, error) {
	return forgetScript.Run(ctx, t.rdb, t.streams, group, t.consumer, idle.Milliseconds(), "others").Int()
}

// Consumer is the transport's consumer name in the group.
func (t *Transport) Consumer() string { return t.consumer }

// PartitionOf is the partition Publish puts an envelope in, and its hash.
func (t *Transport) PartitionOf(correlationID, id string) (int, uint32) {
	return t.partitionOf(correlationID, id)
}

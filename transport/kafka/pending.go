package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/idemhq/idem/transport"
)

var _ transport.PendingCounter = (*Transport)(nil)

// Pending counts the topic's messages that the group has not committed
// (transport.PendingCounter), from the broker: for each partition, its end
// offset less the group's committed offset (or less its start offset
// when the group committed none). Of those, unacked is the deliveries
// this process handed out on a live lease, and ready the rest less the
// records this process acked but cannot commit yet (behind an unsettled
// one). Deliveries other members of the group hold count as ready: Kafka
// keeps no per-message state a client could read.
func (t *Transport) Pending(ctx context.Context) (ready, unacked int, err error) {
	if t.isClosed() {
		return 0, 0, transport.ErrClosed
	}
	total, err := t.lag(ctx)
	if err != nil {
		return 0, 0, err
	}
	t.mu.Lock()
	now, acked := time.Now(), 0
	for _, p := range t.parts {
		for _, r := range p.recs {
			switch {
			case r.st == stAcked:
				acked++
			case r.st == stOut && now.Before(r.until):
				unacked++
			}
		}
	}
	t.mu.Unlock()
	return max(int(total)-unacked-acked, 0), unacked, nil
}

// lag is the number of records of the topic after the group's committed
// offsets.
func (t *Transport) lag(ctx context.Context) (int64, error) {
	adm := kadm.NewClient(t.producer)
	ends, err := adm.ListEndOffsets(ctx, t.cfg.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, t.explain("listing the end offsets of "+t.cfg.Topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, t.cfg.Topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, t.explain("listing the start offsets of "+t.cfg.Topic, err)
	}
	committed, err := adm.FetchOffsets(ctx, t.cfg.Group)
	if err == nil {
		err = committed.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		committed, err = nil, nil // no member committed yet
	}
	if err != nil {
		return 0, t.explain(fmt.Sprintf("fetching the offsets of group %s", t.cfg.Group), err)
	}
	var total int64
	ends.Each(func(e kadm.ListedOffset) {
		from := int64(0)
		if s, ok := starts.Lookup(e.Topic, e.Partition); ok {
			from = s.Offset
		}
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok && c.At >= from {
			from = c.At
		}
		total += max(e.Offset-from, 0)
	})
	return total, nil
}

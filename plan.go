package idem

import (
	"errors"
	"fmt"
	"hash/maphash"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/internal/ids"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// planner turns a received batch into lanes: it decodes each delivery
// into an item (or marks it bad input, with the reason it will be
// dead-lettered), then deals the items to lanes by saga key. It is the
// first part a batch meets; the units (unit.go) run what it plans.
type planner struct {
	*base
	reg *registry
}

// handlerSagaType is the inbox namespace of plain handlers: their inbox key
// is (handlerSagaType, message type, message ID).
const handlerSagaType = "idem.handler"

// item is one delivery on its way through a batch.
type item struct {
	d      transport.Delivery
	m      Machine
	h      HandlerFunc
	msg    any
	key    string // canonical
	rawKey string
	msgID  string // dedup identity
	typ    string // saga type, or handlerSagaType
	reason string // dead-letter reason when the delivery is bad input
	badErr error
	// late marks an item the engine decided to dead-letter after a failed
	// unit of work (storeFailed): it went through decode, so its inbox is
	// read first, and a message committed meanwhile is not dead-lettered.
	late bool
	tp   string // the message span's traceparent, when a Tracer is set
	// ran and handlerErr keep a plain handler's outcome: when its unit of
	// work is re-applied (after a conflict, or one message at a time), the
	// handler's side effects already happened outside it, so it does not
	// run again.
	ran        bool
	handlerErr error
}

func (it *item) sagaKey() store.Key { return store.Key{SagaType: it.typ, Key: it.key} }

// inboxKey is the item's dedup identity: its saga, and its message ID
// qualified by its message type, so that two producers whose IDs overlap
// do not have each other's messages skipped. (A handler's inbox key holds
// the message type already.) The separator U+001F cannot occur in a type
// (transport.ValidateEnvelope refuses control characters there), so the
// form is unambiguous.
func (it *item) inboxKey() store.InboxKey {
	id := it.msgID
	if it.h == nil {
		id = it.d.Envelope.Type + inboxTypeSep + id
	}
	return store.InboxKey{SagaType: it.typ, Key: it.key, MessageID: id}
}

// orderKey is what the key order serialises an item on: its saga key, or
// for a plain handler its inbox identity, so that copies of one message
// received by two consumers run the handler once (the later copy waits,
// then finds the inbox record).
func (it *item) orderKey() store.Key {
	if it.h != nil {
		return store.Key{SagaType: handlerSagaType, Key: it.key + inboxTypeSep + it.msgID}
	}
	return it.sagaKey()
}

// inboxTypeSep separates the message type from the dedup ID in a saga's
// inbox records.
const inboxTypeSep = "\x1f"

var laneSeed = maphash.MakeSeed()

// minLaneItems is the fewest messages a lane gets before a batch is split
// into more lanes: a unit of work costs its round trips whatever its size,
// so splitting a small batch across every lane costs more commits than the
// parallelism gains.
const minLaneItems = 16

// fetchSize is how many deliveries a consumer takes per receive. With a
// BatchSize below minLaneItems (latency first) it is BatchSize for each
// lane of the consumer's share (Lanes / Consumers), so that one receive
// puts several small units of work in flight at once instead of one;
// otherwise it is BatchSize.
func (p *planner) fetchSize() int {
	if p.cfg.BatchSize >= minLaneItems {
		return p.cfg.BatchSize
	}
	return p.cfg.BatchSize * p.lanesPerBatch()
}

// lanesPerBatch is the most lanes one batch is split into: its share of
// Config.Lanes, which every consumer's batches share. With several
// consumers the batches already overlap, and splitting each one further
// only adds commits (each lane is its own transaction).
func (p *planner) lanesPerBatch() int {
	return (p.cfg.Lanes + p.cfg.Consumers - 1) / p.cfg.Consumers
}

// plan decodes a batch and splits it into lanes: the messages of one saga
// key share a lane, in the order received.
func (p *planner) plan(ds []transport.Delivery) [][]*item {
	p.obs.received(len(ds))
	n := uint64(max(1, min(p.lanesPerBatch(), len(ds)/minLaneItems)))
	if p.cfg.BatchSize < minLaneItems {
		n = uint64(p.lanesPerBatch()) // latency first: see fetchSize
	}
	lanes := map[uint64][]*item{}
	var order []uint64
	keyLane := map[string]uint64{}
	for _, d := range ds {
		it := p.decode(d)
		var lane uint64
		switch {
		case it.reason != "":
			lane = 0 // bad input shares one unit of work
		case it.h != nil:
			// Handlers never share a unit of work with sagas: a saga's
			// conflict must not run a handler's side effect again.
			lane = 1 + uint64(p.cfg.Lanes) + maphash.String(laneSeed, it.msgID)%n
		default:
			// The keys take the lanes in turn, in the order they first
			// appear, and a key's messages follow it into its lane.
			k := it.typ + "\x00" + it.key
			l, ok := keyLane[k]
			if !ok {
				l = 1 + uint64(len(keyLane))%n
				keyLane[k] = l
			}
			lane = l
		}
		if _, ok := lanes[lane]; !ok {
			order = append(order, lane)
		}
		lanes[lane] = append(lanes[lane], it)
	}
	out := make([][]*item, len(order))
	for i, l := range order {
		out[i] = lanes[l]
	}
	return out
}

// decodeAll decodes a batch that is one unit of work whatever it holds
// (a claimed batch), in the order received.
func (p *planner) decodeAll(ds []transport.Delivery) []*item {
	p.obs.received(len(ds))
	items := make([]*item, len(ds))
	for i, d := range ds {
		items[i] = p.decode(d)
	}
	return items
}

// decode checks a delivery and finds what consumes it: an item ready for
// a lane, or one marked with the reason to dead-letter it.
func (p *planner) decode(d transport.Delivery) *item {
	env := &d.Envelope
	it := &item{d: d, msgID: env.DedupID()}
	bad := func(reason string, err error) *item {
		it.reason, it.badErr = reason, err
		switch {
		case it.msgID == "":
			it.msgID = ids.Derive("anonymous", env.Type, string(env.Body))
		case len(it.msgID) > MaxIDBytes || transport.ValidateEnvelope(&transport.Envelope{ID: it.msgID}) != nil:
			// The dead letter's ID is a store key: never an over-long or
			// hostile value (an empty ID with a hostile idempotency key).
			it.msgID = ids.Derive("invalid", env.ID, env.IdempotencyKey, env.Type)
		}
		return it
	}
	if env.ID == "" {
		return bad(ReasonMissingID, fmt.Errorf("message of type %q has no ID", env.Type))
	}
	if err := transport.ValidateEnvelope(env); err != nil {
		// No store can be trusted with the field: the dead letter's ID is
		// derived from the raw values, never the values themselves.
		var fe *transport.FieldError
		errors.As(err, &fe)
		it.msgID = ids.Derive("invalid", env.ID, env.IdempotencyKey, env.Type)
		return bad(invalidReason(fe.Field), err)
	}
	if len(env.ID) > MaxIDBytes || len(env.IdempotencyKey) > MaxIDBytes {
		// The ID travels on as the causation ID of every emission: an
		// unbounded one could make them too large for a broker's limit.
		return bad(ReasonInvalidID, fmt.Errorf("message ID or idempotency key of %d bytes exceeds the limit of %d", max(len(env.ID), len(env.IdempotencyKey)), MaxIDBytes))
	}
	if len(env.Body) > p.cfg.MaxBodyBytes {
		return bad(ReasonOversized, fmt.Errorf("body of %d bytes exceeds the limit of %d (Config.MaxBodyBytes)", len(env.Body), p.cfg.MaxBodyBytes))
	}
	if h, ok := p.reg.handlers[env.Type]; ok {
		it.h, it.typ, it.key = h, handlerSagaType, env.Type
		return it
	}
	m, ok := p.reg.machines[env.Type]
	if !ok {
		return bad(ReasonUnknownType, fmt.Errorf("no saga or handler consumes message type %q", env.Type))
	}
	msg, raw, err := m.Decode(env.Type, env.Body)
	if err != nil {
		return bad(ReasonMalformed, err)
	}
	key, err := canon.Key(raw, p.cfg.MaxKeyLen)
	if err != nil {
		it.typ = m.Name()
		return bad(ReasonInvalidKey, fmt.Errorf("correlation key of %s for saga %s: %w", env.Type, m.Name(), err))
	}
	it.m, it.msg, it.rawKey, it.key, it.typ = m, msg, raw, key, m.Name()
	return it
}

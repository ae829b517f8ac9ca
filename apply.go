package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// ErrDeadLettered is wrapped by Apply's error when the message was
// recorded as a dead letter instead of being applied.
var ErrDeadLettered = errors.New("message dead-lettered")

// Result is what Apply learned about a message from the store.
type Result struct {
	// SagaType and Key name the saga the message belongs to (Key is the
	// canonical key).
	SagaType string
	Key      string
	// Duplicate is true when the store already held the message before
	// Apply published it: it was applied earlier and is not applied again.
	Duplicate bool
	// State, Data and Version are the saga as read after the message was
	// committed (a later message may already have changed it). They are
	// empty when the message was ignored by a saga that does not exist.
	State   string
	Data    json.RawMessage
	Version int64
	// Finished is true when the saga is in a final state.
	Finished bool
}

// applyPoll bounds the pause between two reads of the store while Apply
// waits.
const (
	applyPollMin = 2 * time.Millisecond
	applyPollMax = 100 * time.Millisecond
)

// PublishAndWait publishes env and waits until a saga has committed it (or had
// committed it before: Result.Duplicate), then returns the saga as the
// store holds it. It learns the outcome from the store, not from this
// process, so it works when another replica consumes the message; the
// engine that calls it need not be started.
//
// env must be of a type a registered saga consumes (a handler's outcome is
// not recorded in a way Apply can read). A message the consumer
// dead-letters returns an error wrapping ErrDeadLettered with the reason.
// When ctx ends first, Apply returns ctx's error and the message stays
// published: it is applied as usual, and a later Apply of the same envelope
// reports it as a duplicate. An event that finds no saga and cannot start
// one is ignored by default without a record, so Apply waits for it until
// ctx ends; give such calls a deadline.
func (e *Engine) PublishAndWait(ctx context.Context, env Envelope) (Result, error) {
	m, key, err := e.applyTarget(&env)
	if err != nil {
		return Result{}, err
	}
	probe := applyProbe{e: e, sk: store.Key{SagaType: m.Name(), Key: key}, typ: env.Type}
	it := &item{d: transport.Delivery{Envelope: env}, typ: m.Name(), key: key, msgID: env.DedupID()}
	probe.ik = it.inboxKey()
	if r, done, err := probe.read(ctx); err != nil || done {
		r.Duplicate = done
		return r, err
	}
	if err := e.Publish(ctx, env); err != nil {
		return Result{}, err
	}
	for pause := applyPollMin; ; pause = min(2*pause, applyPollMax) {
		if !sleepCtx(ctx, pause) {
			return Result{}, fmt.Errorf("idem: apply %s: %w (the message is published and will be applied)", env.ID, ctx.Err())
		}
		r, done, err := probe.read(ctx)
		if err != nil && !errors.Is(err, ErrDeadLettered) && ctx.Err() == nil {
			continue // the store did not answer: read again
		}
		if err != nil || done {
			return r, err
		}
	}
}

// applyTarget validates env and finds its saga and canonical key.
func (e *Engine) applyTarget(env *Envelope) (Machine, string, error) {
	maxBody := e.cfg.MaxBodyBytes
	if env.ID == "" || env.Type == "" {
		return nil, "", fmt.Errorf("idem: apply: %w: ID and type are required", ErrInvalidEnvelope)
	}
	if err := transport.ValidateEnvelope(env); err != nil {
		return nil, "", fmt.Errorf("idem: apply: %w: %w", ErrInvalidEnvelope, err)
	}
	if len(env.ID) > MaxIDBytes || len(env.IdempotencyKey) > MaxIDBytes || len(env.Body) > maxBody {
		return nil, "", fmt.Errorf("idem: apply: %w: ID or idempotency key over %d bytes, or body over Config.MaxBodyBytes (%d): the consumer would dead-letter it",
			ErrInvalidEnvelope, MaxIDBytes, maxBody)
	}
	e.mu.Lock()
	m, ok := e.reg.machine(env.Type)
	e.mu.Unlock()
	if !ok {
		return nil, "", fmt.Errorf("idem: apply %s: no saga of this engine consumes %q: register it, or use Publish", env.ID, env.Type)
	}
	_, raw, err := m.Decode(env.Type, env.Body)
	if err != nil {
		return nil, "", fmt.Errorf("idem: apply %s: %w: %w", env.ID, ErrInvalidEnvelope, err)
	}
	key, err := canon.Key(raw, e.cfg.MaxKeyLen)
	if err != nil {
		return nil, "", fmt.Errorf("idem: apply %s: %w: correlation key: %w", env.ID, ErrInvalidEnvelope, err)
	}
	return m, key, nil
}

// applyProbe reads what the store knows of one message.
type applyProbe struct {
	e   *Engine
	sk  store.Key
	ik  store.InboxKey
	typ string // the message type: a dead letter of another type is another message
}

// read reports done when the inbox holds the message, with the saga; it
// returns an error wrapping ErrDeadLettered when a dead letter holds it.
func (p *applyProbe) read(ctx context.Context) (Result, bool, error) {
	r := Result{SagaType: p.sk.SagaType, Key: p.sk.Key}
	in, seen, err := p.load(ctx)
	if err != nil {
		return r, false, err
	}
	if seen {
		if in != nil {
			r.State, r.Data, r.Version, r.Finished = in.State, in.Data, in.Version, !in.FinishedAt.IsZero()
		}
		return r, true, nil
	}
	dl, err := p.e.store.GetDeadLetter(ctx, inboxMessageID(p.ik))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return r, false, nil
	case err != nil:
		return r, false, err
	case dl.Envelope.Type != p.typ:
		return r, false, nil
	case replayOpen(dl):
		return r, false, nil // re-queued: wait for its outcome
	}
	return r, false, fmt.Errorf("idem: apply %s: %w: %s: %s", dl.Envelope.ID, ErrDeadLettered, dl.Reason, dl.Error)
}

// load reads the message's inbox record and, once it is there, the saga,
// in a unit of work that it rolls back before returning, so that a waiter
// holds no connection while it reads the dead letters (on a pool of n
// connections, n waiters each holding one would wait forever for a
// second). The saga is read by a Load of its own, after the one that saw
// the record: one Load may read its instances before its inbox records
// (pgstore does, in two statements at READ COMMITTED), and a commit
// between the two would pair the message's record with the saga as it was
// before the message.
func (p *applyProbe) load(ctx context.Context) (*store.Instance, bool, error) {
	uow, err := p.e.store.Begin(ctx)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = uow.Rollback(ctx) }()
	lr, err := uow.Load(ctx, &store.LoadParams{Inbox: []store.InboxKey{p.ik}})
	if err != nil || !lr.Seen[p.ik] {
		return nil, false, err
	}
	if lr, err = uow.Load(ctx, &store.LoadParams{Keys: []store.Key{p.sk}}); err != nil {
		return nil, false, err
	}
	return lr.Instances[p.sk], true, nil
}

// inboxMessageID is the dedup ID inside a saga's inbox message ID (which
// is qualified by the message type), the ID a dead letter is stored under.
func inboxMessageID(ik store.InboxKey) string {
	for i := 0; i < len(ik.MessageID); i++ {
		if ik.MessageID[i] == inboxTypeSep[0] {
			return ik.MessageID[i+1:]
		}
	}
	return ik.MessageID
}

package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

// ReplayDeadLetter publishes the dead letter's envelope again, with its
// original ID, for the engines to consume as a new delivery. It re-queues
// the message; whether the replay worked is known only later, from the
// dead letter's history.
//
// On a store that keeps the history (store.DeadLetterReplayer, every
// bundled store), the dead letter is kept: the replay is recorded as
// pending before the publish, and the envelope carries the header
// store.HeaderReplay.
//
// The envelope also carries a new transport.HeaderRepublish mark, so that
// a transport with a deduplication window (natsjs: Nats-Msg-Id within
// the stream's duplicate window) delivers the replay instead of dropping
// it as a copy of the message's first publish, however soon after it;
// the ID stays the same, so the inbox still applies the message at most
// once. The replay is settled as failed when the message is
// dead-lettered again, as succeeded when an engine consumes it without
// dead-lettering it, as duplicate when an engine finds it applied already
// (an earlier copy was, and the replay applied nothing), and as not sent
// when the publish fails. On another store, the dead letter is deleted
// before the publish and recorded again if the publish fails.
//
// A dead letter whose latest replay succeeded or was a duplicate is not
// replayed again (the error wraps ErrReplaySucceeded: its message would
// run twice once the inbox forgot it); ForceReplayDeadLetter replays it.
// One whose latest replay is pending is never replayed again before it is
// settled (the error wraps store.ErrReplayPending).
//
// The error wraps store.ErrNotFound when there is no such dead letter.
func (e *Engine) ReplayDeadLetter(ctx context.Context, id string) error {
	return e.replays.replay(ctx, id, false)
}

// ForceReplayDeadLetter is ReplayDeadLetter that also replays a dead letter
// whose latest replay succeeded, running its message again unless the
// inbox still remembers it. A pending replay still refuses it.
func (e *Engine) ForceReplayDeadLetter(ctx context.Context, id string) error {
	return e.replays.replay(ctx, id, true)
}

// replays replays dead letters: it publishes a dead letter's message again,
// keeping its replay history where the store keeps one
// (store.DeadLetterReplayer), or deleting it first otherwise.
type replays struct{ *base }

// ErrReplaySucceeded is returned by ReplayDeadLetter for a dead letter
// whose latest replay succeeded.
var ErrReplaySucceeded = errors.New("the dead letter's latest replay succeeded: replaying it again would run its message again (force it to)")

func (r *replays) replay(ctx context.Context, id string, force bool) (err error) {
	ctx, end := r.trace.background(ctx, TaskReplay)
	defer func() {
		n := 0
		if err == nil {
			n = 1
		}
		end(n, err)
	}()
	dl, err := r.store.GetDeadLetter(ctx, id)
	if err != nil {
		return fmt.Errorf("idem: replay dead letter %s: %w", id, err)
	}
	if r.caps.replayer == nil {
		return r.deleting(ctx, dl)
	}
	if dl.State() == store.DeadLettersResolved && !force {
		return fmt.Errorf("idem: replay dead letter %s: %w", id, ErrReplaySucceeded)
	}
	at := r.cfg.Clock().UTC()
	if err := r.caps.replayer.BeginReplay(ctx, id, at); err != nil {
		return fmt.Errorf("idem: replay dead letter %s: record the replay: %w", id, err)
	}
	env := dl.Envelope
	markRepublish(&env)
	env.Headers[store.HeaderReplay] = at.Format(time.RFC3339Nano)
	if perr := r.tr.Publish(ctx, []Envelope{env}); perr != nil {
		p := &store.SettleReplaysParams{IDs: []string{id}, Outcome: store.ReplayNotSent, At: r.cfg.Clock().UTC(), Error: perr.Error()}
		if err := r.caps.replayer.SettleReplays(context.WithoutCancel(ctx), p); err != nil {
			return fmt.Errorf("idem: replay dead letter %s: publish: %w; record the failure: %w", id, perr, err)
		}
		return fmt.Errorf("idem: replay dead letter %s: publish: %w (the dead letter is kept)", id, perr)
	}
	return nil
}

// deleting replays on a store without history: delete, publish, and
// record the dead letter again if the publish fails. (Deleting first means
// a replay that fails again records a new dead letter that stays.)
func (r *replays) deleting(ctx context.Context, dl *store.DeadLetter) error {
	if _, err := r.store.DeleteDeadLetters(ctx, []string{dl.ID}); err != nil {
		return fmt.Errorf("idem: replay dead letter %s: delete: %w", dl.ID, err)
	}
	env := dl.Envelope
	markRepublish(&env)
	if perr := r.tr.Publish(ctx, []Envelope{env}); perr != nil {
		if err := r.restore(context.WithoutCancel(ctx), dl); err != nil {
			return fmt.Errorf("idem: replay dead letter %s: publish: %w; restore: %w", dl.ID, perr, err)
		}
		return fmt.Errorf("idem: replay dead letter %s: publish: %w (the dead letter is kept)", dl.ID, perr)
	}
	return nil
}

func (r *replays) restore(ctx context.Context, dl *store.DeadLetter) error {
	uow, err := r.store.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = uow.Rollback(ctx) }()
	return uow.Commit(ctx, &store.Changes{DeadLetters: []store.DeadLetter{*dl}})
}

// replayOpen reports whether dl's message was re-queued and has not failed
// since: it is no longer a dead letter's final word.
func replayOpen(dl *store.DeadLetter) bool {
	r := dl.LastReplay()
	return r != nil && (r.Outcome == store.ReplayPending || r.Outcome == store.ReplaySucceeded || r.Outcome == store.ReplayDuplicate)
}

// replayPending reports whether dl's last replay is pending.
func replayPending(dl *store.DeadLetter) bool {
	r := dl.LastReplay()
	return r != nil && r.Outcome == store.ReplayPending
}

package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Publish hands envelopes to the transport. Each needs an ID and a type;
// SentAt is set when zero, and CorrelationID when empty and a saga of this
// engine consumes the type (on copies: the caller's envelopes are not
// modified). An envelope with the header transport.HeaderToken is refused:
// use PublishWithTokens, which mints the token the header promises.
//
// An envelope that names an operator (transport.HeaderActor: the admin
// console's "retry now" and "send event") is a deliberate re-publish:
// Publish gives it a new transport.HeaderRepublish mark, replacing any it
// carries, so that a transport with a deduplication window (natsjs)
// delivers it even when a message with its ID was published moments
// before. Its ID is unchanged, and the inbox still applies the message at
// most once. Other envelopes keep their headers as they are, so that
// publishing one again is dropped by such a window.
func (e *Engine) Publish(ctx context.Context, envs ...Envelope) error {
	envs = slices.Clone(envs)
	for i := range envs {
		if err := checkPublish(i, &envs[i]); err != nil {
			return err
		}
		if _, ok := envs[i].Headers[transport.HeaderToken]; ok {
			return fmt.Errorf("idem: publish envelope %d: %w: header %s is only set by PublishWithTokens (without a minted token the consumer would drop the message as a duplicate)", i, ErrInvalidEnvelope, transport.HeaderToken)
		}
		e.correlate(&envs[i])
	}
	return e.publish(ctx, envs)
}

// correlate sets env's empty CorrelationID from the saga that consumes it
// (see correlate), decoding the body without the engine's lock.
func (e *Engine) correlate(env *Envelope) {
	if env.CorrelationID != "" {
		return
	}
	e.mu.Lock()
	m, ok := e.reg.machine(env.Type)
	e.mu.Unlock()
	if ok {
		correlate(m, env, e.cfg.MaxKeyLen)
	}
}

func checkPublish(i int, env *Envelope) error {
	if env.ID == "" || env.Type == "" {
		return fmt.Errorf("idem: publish envelope %d (id %q, type %q): %w: ID and type are required", i, env.ID, env.Type, ErrInvalidEnvelope)
	}
	if err := transport.ValidateEnvelope(env); err != nil {
		return fmt.Errorf("idem: publish envelope %d: %w: %w", i, ErrInvalidEnvelope, err)
	}
	if err := transport.ValidateFairness(env); err != nil {
		return fmt.Errorf("idem: publish envelope %d: %w: %w", i, ErrInvalidEnvelope, err)
	}
	return nil
}

// publish sets SentAt where zero on envs (the caller's copies), marks
// those an operator sent as re-publishes (see Publish), and hands them to
// the transport, each in a send span when sends are traced.
func (e *Engine) publish(ctx context.Context, envs []Envelope) error {
	now := e.cfg.Clock()
	for i := range envs {
		if envs[i].SentAt.IsZero() {
			envs[i].SentAt = now
		}
		if envs[i].Headers[transport.HeaderActor] != "" {
			markRepublish(&envs[i])
		}
	}
	spans := e.trace.startPublish(ctx, envs)
	err := e.tr.Publish(ctx, envs)
	spans.end(err)
	if err != nil {
		return fmt.Errorf("idem: publish %d messages: %w", len(envs), err)
	}
	return nil
}

// PublishWithTokens is Publish for messages from outside Idem that want the
// token inbox's guarantee: it mints a dedup token for each envelope in the
// store, then publishes them marked with transport.HeaderToken. The engine
// that applies one claims its token, and every later copy of it (same type
// and DedupID) is a duplicate, however late. It fails with ErrNoTokens when
// the store keeps no tokens. If the publish fails the tokens stay; calling
// again with the same envelopes is safe.
func (e *Engine) PublishWithTokens(ctx context.Context, envs ...Envelope) error {
	ts := e.caps.tokens
	if ts == nil {
		return fmt.Errorf("idem: publish with tokens: %w", ErrNoTokens)
	}
	envs = slices.Clone(envs)
	now := e.cfg.Clock()
	tokens := make([]store.Token, len(envs))
	for i := range envs {
		if err := checkPublish(i, &envs[i]); err != nil {
			return err
		}
		h := make(map[string]string, len(envs[i].Headers)+1)
		for k, v := range envs[i].Headers {
			h[k] = v
		}
		h[transport.HeaderToken] = "1"
		envs[i].Headers = h
		e.correlate(&envs[i])
		tokens[i] = store.Token{ID: TokenID(&envs[i]), MintedAt: now}
	}
	if err := ts.MintTokens(ctx, tokens); err != nil {
		return fmt.Errorf("idem: publish with tokens: mint %d tokens: %w", len(tokens), err)
	}
	return e.publish(ctx, envs)
}

// markRepublish marks env as a deliberate re-publish of its message with a
// new transport.HeaderRepublish mark, on a copy of its headers (the
// caller's map is not modified). The mark is random: each re-publish is
// one operator action, published once, and two actions must never share
// a mark (a fixed test clock would make two timestamps equal).
func markRepublish(env *Envelope) {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	h := make(map[string]string, len(env.Headers)+1)
	maps.Copy(h, env.Headers)
	h[transport.HeaderRepublish] = hex.EncodeToString(b[:])
	env.Headers = h
}

// Package sqlq holds what Idem's SQL stores (pgstore, sqlitestore) share:
// the envelope's storage form, queue delivery tokens, list cursors and
// limits, the choice of an instance query's statement, and the reading of
// the embedded migrations that set the schema version. It follows the
// conventions documented in package memstore.
package sqlq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
	"github.com/idemhq/idem/transport"
)

// DefaultLimit is the page or claim size used when a Limit is below 1.
const DefaultLimit = 100

// Limit returns n, or DefaultLimit when n < 1.
func Limit(n int) int {
	if n < 1 {
		return DefaultLimit
	}
	return n
}

// EncodeEnvelope splits an envelope into its metadata as JSON (without the
// body) and its body, which SQL stores keep in a binary column.
func EncodeEnvelope(e transport.Envelope) (string, []byte, error) {
	body := e.Body
	e.Body = nil
	meta, err := json.Marshal(e)
	if err != nil {
		return "", nil, fmt.Errorf("encode envelope %s: %w", e.ID, err)
	}
	if body == nil {
		body = []byte{}
	}
	return string(meta), body, nil
}

// DecodeEnvelope joins what EncodeEnvelope split; times come back in UTC.
func DecodeEnvelope(meta, body []byte) (transport.Envelope, error) {
	var e transport.Envelope
	if err := json.Unmarshal(meta, &e); err != nil {
		return e, fmt.Errorf("decode envelope: %w", err)
	}
	e.Body = body
	if !e.SentAt.IsZero() {
		e.SentAt = e.SentAt.UTC()
	}
	if len(e.Headers) == 0 {
		e.Headers = nil // as EncodeEnvelope writes none: one form for "no headers"
	}
	return e, nil
}

// NewToken returns a random claim token.
func NewToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// FormatToken is a delivery's Token: the queue row and the claim's token.
func FormatToken(seq int64, tok string) string { return strconv.FormatInt(seq, 10) + ":" + tok }

// ParseToken splits a delivery Token made by FormatToken.
func ParseToken(s string) (int64, string, bool) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return 0, "", false
	}
	seq, err := strconv.ParseInt(a, 10, 64)
	return seq, b, err == nil && b != ""
}

// RetiredPrefix starts the token column of a queue row whose delivery was
// nacked (or returned by the unit of work that claimed it): the SQL queues
// write RetiredPrefix and the claim's token there, in the Nack's UPDATE,
// so that a later Ack, Nack or lease extension with the old token matches
// no row and is ignored, as for a settled delivery, instead of replacing
// the Nack's delay. The next Receive writes a new token.
const RetiredPrefix = "nacked:"

// LeaseLost reports whether a queue row whose token column holds cur was
// handed out again since the claim whose token is tok: it holds neither
// tok (a settlement in flight holds the row) nor tok retired by a Nack.
func LeaseLost(cur, tok string) bool {
	return cur != tok && cur != RetiredPrefix+tok
}

// Lost reports whether a claim with token tok has lost the queue row
// whose token column holds cur and whose lease has passed when expired
// (visible_at <= now, by the database's clock): the row was handed out
// again since (LeaseLost), or tok holds limits (HeldPrefix) and its
// lease has passed. A held claim cannot outlive its lease, because its
// holds expire with it and another message may have been admitted in
// their place; a plain claim past its lease and not handed out again
// still settles. The SQL queues write the same rule into their Ack, Nack,
// lease extension and unit-of-work Consume, as the condition
// "visible_at > now OR token does not start with HeldPrefix".
func Lost(cur, tok string, expired bool) bool {
	return LeaseLost(cur, tok) || (cur == tok && expired && strings.HasPrefix(tok, HeldPrefix))
}

// ErrForeignToken is wrapped when a delivery's token was not made by this
// kind of store.
var ErrForeignToken = errors.New("delivery token is not from this store")

// SplitTokens parses the tokens of deliveries.
func SplitTokens(ds []transport.Delivery) ([]int64, []string, error) {
	seqs, toks := make([]int64, len(ds)), make([]string, len(ds))
	for i, d := range ds {
		seq, tok, ok := ParseToken(d.Token)
		if !ok {
			return nil, nil, fmt.Errorf("delivery %s: token %q: %w", d.Envelope.ID, d.Token, ErrForeignToken)
		}
		seqs[i], toks[i] = seq, tok
	}
	return seqs, toks, nil
}

// InstanceCursor parses ListParams.After for instances: "type\x00key", or
// just the key when the list is filtered by saga type.
func InstanceCursor(p *store.ListParams) (sagaType, key string, err error) {
	if p.After == "" {
		return "", "", nil
	}
	if t, k, ok := strings.Cut(p.After, "\x00"); ok {
		return t, k, nil
	}
	if p.SagaType != "" {
		return p.SagaType, p.After, nil
	}
	return "", "", fmt.Errorf("cursor %q without saga type: want saga type, NUL, key", p.After)
}

// TimerCursor parses ListParams.After for timers: due time (RFC 3339),
// saga type, key and name joined with NUL.
func TimerCursor(after string) (due time.Time, sagaType, key, name string, err error) {
	parts := strings.Split(after, "\x00")
	if len(parts) != 4 {
		return due, "", "", "", fmt.Errorf("cursor %q: want due time, saga type, key, name separated by NUL", after)
	}
	if due, err = time.Parse(time.RFC3339Nano, parts[0]); err != nil {
		return due, "", "", "", fmt.Errorf("cursor %q: %w", after, err)
	}
	return due, parts[1], parts[2], parts[3], nil
}

// CompareTimers orders timers by due time, then saga type, key and name.
func CompareTimers(a, b store.Timer) int {
	if c := a.DueAt.Compare(b.DueAt); c != 0 {
		return c
	}
	return strings.Compare(a.SagaType+"\x00"+a.Key+"\x00"+a.Name, b.SagaType+"\x00"+b.Key+"\x00"+b.Name)
}

// Poller is how a SQL queue's receive waits for messages: Check refuses a
// closed store, Wake returns the channel a publish through this process
// closes, Done is closed with the store, and Every is its poll interval.
type Poller struct {
	Check func(op string) error
	Wake  func() <-chan struct{}
	Done  <-chan struct{}
	Every time.Duration
}

// Receive is a SQL queue's receive loop: it takes (take returns the
// deliveries, or when none the time the next becomes visible, zero when
// unknown) and waits (WaitOr) until take returns some, ctx ends or the
// store closes. It returns none, and no error, once changed is closed (an
// admitting receive's limits changed). op names it in errors: "sqlitestore:
// receive", say.
func (p *Poller) Receive(ctx context.Context, op string, changed <-chan struct{}, take func(context.Context) ([]transport.Delivery, time.Time, error)) ([]transport.Delivery, error) {
	for {
		if err := p.Check("receive"); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		wake := p.Wake()
		ds, next, err := take(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if cerr := p.Check("receive"); cerr != nil {
				return nil, cerr
			}
			return nil, err
		}
		if len(ds) > 0 {
			return ds, nil
		}
		stop, err := WaitOr(ctx, p.Done, wake, changed, next, p.Every)
		if stop {
			return nil, nil
		}
		if err != nil {
			if errors.Is(err, transport.ErrClosed) {
				return nil, fmt.Errorf("%s: %w", op, err)
			}
			return nil, err
		}
	}
}

// Wait is the idle wait of a SQL queue's Receive: it returns nil once wake
// is closed (a publish through this process), next is reached (the next
// message becomes visible; zero means unknown), or poll has passed, whichever
// comes first. It returns ctx's error when ctx ends and transport.ErrClosed
// when done is closed.
func Wait(ctx context.Context, done, wake <-chan struct{}, next time.Time, poll time.Duration) error {
	_, err := WaitOr(ctx, done, wake, nil, next, poll)
	return err
}

// WaitOr is Wait that also ends when changed is closed (a nil changed
// never is), reporting whether it did: an admitting receive's limits
// changed (store.ReceiveParams.Changed).
func WaitOr(ctx context.Context, done, wake, changed <-chan struct{}, next time.Time, poll time.Duration) (bool, error) {
	wait := poll
	if !next.IsZero() {
		if d := time.Until(next); d < wait {
			wait = max(d, time.Millisecond)
		}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-done:
		return false, transport.ErrClosed
	case <-changed:
		return true, nil
	case <-wake:
	case <-t.C:
	}
	return false, nil
}

// InstanceStatements are a store's four statements of an InstanceQuery:
// in key order or stuck order (least recently updated first), each
// forward from After or backward from Before.
type InstanceStatements struct {
	Keys, KeysBefore, Stuck, StuckBefore string
}

// Pick returns the statement of p's order and direction, and its cursor
// (zero when p has none).
func (st InstanceStatements) Pick(p *readmodel.InstanceQuery) (string, *readmodel.InstanceCursor) {
	c, q := p.After, st.Keys
	switch {
	case p.Before != nil && p.Stuck:
		c, q = p.Before, st.StuckBefore
	case p.Before != nil:
		c, q = p.Before, st.KeysBefore
	case p.Stuck:
		q = st.Stuck
	}
	if c == nil {
		c = &readmodel.InstanceCursor{}
	}
	return q, c
}

// HeldPrefix starts the claim token of the deliveries of an admitting
// receive (store.AdmittingQueue), whose Token is the Holder of their
// limit holds: settling one releases its holds, and extending its lease
// extends them. A plain Receive's token is hex and never starts with it,
// so settling its deliveries costs no statement more.
const HeldPrefix = "held"

// Holders returns the Tokens of the deliveries of ds that hold limits
// (their claim token starts with HeldPrefix), nil when none do.
func Holders(ds []transport.Delivery) []string {
	var hs []string
	for _, d := range ds {
		if _, tok, ok := ParseToken(d.Token); ok && strings.HasPrefix(tok, HeldPrefix) {
			hs = append(hs, d.Token)
		}
	}
	return hs
}

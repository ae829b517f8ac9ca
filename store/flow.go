package store

import (
	"context"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/transport"
)

// Flow control: a store that implements Limiter keeps limits (concurrency
// caps and token-bucket rate limits) and admits messages under them,
// across every replica that shares it. A store that is its own queue may
// also implement AdmittingQueue, which admits inside the transaction that
// leases the work. Both must pass storetest's Flow cases.

// MaxLimitName bounds the length in bytes of a limit's name and of a
// counter's key.
const MaxLimitName = 200

// DeclarationRefresh is the longest pause between two declarations of its
// limits by a running engine (Limiter.DeclareLimits): the engine declares
// them at Start, then every min(idem.Config.HeartbeatInterval,
// DeclarationRefresh).
const DeclarationRefresh = 10 * time.Second

// DeclarationStale is how old a declaration's UpdatedAt may be before the
// operator's tools show it as not declared by a running engine (three
// refreshes missed). It is a constant, not a setting, so that a tool in
// another process (idem console, idem limits ls) knows it without the
// engines' configuration.
const DeclarationStale = 3 * DeclarationRefresh

// DeclarationIsStale reports whether a declaration last made at updated is
// older than DeclarationStale at now: no running engine has declared it
// for three refreshes. The engine's sweeper deletes it later
// (Limiter.ForgetDeclarations).
func DeclarationIsStale(updated, now time.Time) bool {
	return !updated.IsZero() && now.Sub(updated) > DeclarationStale
}

// ValidateForgetAge refuses an olderThan of Limiter.ForgetDeclarations
// below a millisecond, with an error wrapping ErrRejected.
func ValidateForgetAge(olderThan time.Duration) error {
	if olderThan < time.Millisecond {
		return limitErr("olderThan", "forget declarations older than %v: give a millisecond or more", olderThan)
	}
	return nil
}

// Limit is a limit's values as the store keeps them: a runtime override
// (Limiter.SetLimit) or the code's declaration (Limiter.DeclareLimits).
// The zero value of each field means "no limit of that kind".
type Limit struct {
	// Name names the limit: non-empty, valid UTF-8 without U+0000, at
	// most MaxLimitName bytes.
	Name string `json:"name"`
	// Concurrency is the most requests admitted and not released at once,
	// across replicas; 0: no cap.
	Concurrency int `json:"concurrency"`
	// Rate is the admissions per second across replicas (a token bucket
	// refilled continuously); 0: no rate limit.
	Rate float64 `json:"rate"`
	// Burst is the bucket's size; with Rate > 0 and Burst < 1, 1. A new
	// bucket starts full.
	Burst int `json:"burst"`
	// UpdatedAt is when the override was set or the declaration last
	// made (a running engine refreshes it: DeclarationRefresh); the store
	// sets it.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// BucketSize is the token bucket's size: Burst, at least 1; 0 when the
// limit has no rate.
func (l *Limit) BucketSize() float64 {
	if l.Rate <= 0 {
		return 0
	}
	return float64(max(l.Burst, 1))
}

// Validate refuses a limit a store must not keep, with an error that
// wraps ErrRejected and names the field.
func (l *Limit) Validate() error {
	if err := ValidateLimitText("Name", l.Name); err != nil {
		return err
	}
	switch {
	case l.Concurrency < 0:
		return limitErr("Concurrency", "limit %q: Concurrency is %d: give 0 (no cap) or more", l.Name, l.Concurrency)
	case l.Rate < 0 || math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0):
		return limitErr("Rate", "limit %q: Rate is %v: give 0 (no rate limit) or a finite rate per second", l.Name, l.Rate)
	case l.Burst < 0:
		return limitErr("Burst", "limit %q: Burst is %d: give 0 or more", l.Name, l.Burst)
	}
	return nil
}

// ValidateLimitText refuses a limit's name or a counter's key that a
// store does not keep: empty (for a name), invalid UTF-8, holding U+0000,
// or longer than MaxLimitName bytes. The error wraps ErrRejected and names
// field.
func ValidateLimitText(field, s string) error {
	switch {
	case s == "" && field == "Name":
		return limitErr(field, "limit name is empty")
	case len(s) > MaxLimitName:
		return limitErr(field, "limit %s is %d bytes long: at most %d", field, len(s), MaxLimitName)
	case !utf8.ValidString(s):
		return limitErr(field, "limit %s %q is not valid UTF-8", field, s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return limitErr(field, "limit %s %q holds U+0000", field, s)
		}
	}
	return nil
}

func limitErr(field, format string, args ...any) error {
	return &RejectedError{Field: field, Err: fmt.Errorf(format, args...)}
}

// LimitKey names one counter of a limit: Key "" for an unpartitioned
// limit, else the partition (a tenant, say).
type LimitKey struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// Compare orders counters by (Name, Key), byte for byte: the order in
// which stores lock them.
func (k LimitKey) Compare(o LimitKey) int {
	switch {
	case k.Name < o.Name:
		return -1
	case k.Name > o.Name:
		return 1
	case k.Key < o.Key:
		return -1
	case k.Key > o.Key:
		return 1
	}
	return 0
}

// LimitUse is a counter's current use.
type LimitUse struct {
	LimitKey
	// InFlight counts the live holds (admitted, not released, not
	// expired).
	InFlight int `json:"in_flight"`
	// Tokens is what the counter's bucket held at its last admission,
	// refilled up to now by the limit's Rate in force as the store knows
	// it (the override, else the declaration), else as last written; 0
	// without a bucket.
	Tokens float64 `json:"tokens"`
	// Waiting counts the visible queue messages whose current refusal
	// (AdmittingQueue.ReceiveAdmitted records it) names this counter:
	// messages an admitting receive looked at and could not admit, and
	// those behind them of their partition key. A message no admitting
	// receive has looked at is not counted; 0 for a store that is no
	// AdmittingQueue.
	Waiting int `json:"waiting"`
}

// AdmitRequest is one request for admission: Holder, unique per delivery,
// names the holds it takes; Keys are the counters it needs (duplicates
// count once).
type AdmitRequest struct {
	Holder string
	Keys   []LimitKey
}

// Admission is the decision on one AdmitRequest.
type Admission struct {
	// Admitted reports whether the request was admitted.
	Admitted bool
	// Refused is the first counter, in the request's order, that refused
	// it (zero when admitted).
	Refused LimitKey
	// Wait is, for a refusal by a rate, the time until that counter's
	// next token; 0 for a refusal by a cap.
	Wait time.Duration
}

// AdmitParams are the inputs of Limiter.Admit.
type AdmitParams struct {
	// Limits are the limits in force by name (the engine merges the
	// code's declarations and the store's overrides). A counter whose
	// name is not here is unlimited.
	Limits map[string]Limit
	// Requests are decided in order.
	Requests []AdmitRequest
	// TTL is how long an admitted request's holds live, by the store's
	// clock, unless extended or released; at least a millisecond.
	TTL time.Duration
}

// Limiter is a store that keeps limits and admits messages under them.
// It is an optional capability, found by type assertion; an
// implementation must pass storetest's Flow cases. Every method is safe
// for concurrent use, from one process or many.
type Limiter interface {
	// SetLimit creates or replaces the override of l.Name. A limit that
	// Limit.Validate refuses is refused with its error (wrapping
	// ErrRejected and naming the field). Holds taken under the previous
	// values stay until released or expired: a lowered cap admits nothing
	// new until the live holds fall below it.
	SetLimit(ctx context.Context, l Limit) error
	// ResetLimit removes the override of name; none is not an error.
	// Live holds under it are still released as usual.
	ResetLimit(ctx context.Context, name string) error
	// Limits returns the overrides, ordered by name.
	Limits(ctx context.Context) ([]Limit, error)
	// DeclareLimits records the values the code declares
	// (idem.Config.Limits), so that an operator's tool in another process
	// can show them: an upsert by name that sets UpdatedAt (by the store's
	// clock). A running engine declares its limits again at least every
	// DeclarationRefresh, so UpdatedAt is the last time a running engine
	// declared the limit. Replicas running different builds may declare
	// different values; the last writer wins. A declaration goes only by
	// ForgetDeclarations (a later DeclareLimits brings it back), and it
	// never changes an override. Each limit is checked as SetLimit checks
	// it; a bad one fails the whole call (nothing recorded), wrapping
	// ErrRejected.
	DeclareLimits(ctx context.Context, ls []Limit) error
	// DeclaredLimits returns the declarations, ordered by name.
	DeclaredLimits(ctx context.Context) ([]Limit, error)
	// ForgetDeclarations deletes the declarations whose UpdatedAt is more
	// than olderThan ago, by the store's clock (the database's where
	// processes share it), and that no counter or hold is kept for (SweepCounters
	// deletes a counter only once its bucket is full again under the
	// declaration), and returns how many it deleted: limits that no
	// running engine declares any more. A drained bucket of a limit whose
	// engines are all down thus keeps its declaration, and is never
	// swept as if it had no rate. It never removes an override
	// (SetLimit's rows stay until ResetLimit), a counter or a hold: holds
	// taken under a forgotten limit are released as before. An olderThan
	// below a millisecond is refused, wrapping ErrRejected.
	ForgetDeclarations(ctx context.Context, olderThan time.Duration) (int, error)
	// LimitUses returns every counter that has a live hold, a bucket or
	// a message waiting for it (LimitUse.Waiting), ordered by (Name, Key).
	LimitUses(ctx context.Context) ([]LimitUse, error)
	// Admit decides each request of p in order, in one transaction: a
	// request is admitted only if every counter it needs admits it (all
	// or none). An admitted request holds one slot of each capped counter
	// until released or until p.TTL passes (by the store's clock: the
	// database's where processes share it), and takes one token of each
	// rate-limited counter. A refused request takes nothing. Counters are
	// locked in (Name, Key) order, so two Admits cannot deadlock, and
	// concurrent Admits from many connections never admit more than
	// Concurrency live holds on a counter. Keys are checked as
	// ValidateLimitText checks them; a bad one fails the whole call,
	// wrapping ErrRejected.
	Admit(ctx context.Context, p *AdmitParams) ([]Admission, error)
	// ExtendHolds makes the live holds of these holders expire ttl from
	// now. An expired hold is released already and stays so; an unknown
	// holder is ignored.
	ExtendHolds(ctx context.Context, holders []string, ttl time.Duration) error
	// ReleaseHolds releases every hold of these holders, outside a unit
	// of work (Changes.ReleaseHolds releases them in one); an unknown
	// holder is ignored.
	ReleaseHolds(ctx context.Context, holders []string) error
	// SweepCounters deletes, in one short transaction, the counters that
	// no decision needs among at most p.Limit counters read after p.After
	// (in the store's order of counters), and at most p.Limit expired
	// holds. A counter read is deleted when it has no live hold, no
	// admission has decided on it for longer than p.Idle (by the store's
	// clock), and its bucket is full: refilled to its size under the
	// limit in force as the store knows it (the override, else the
	// declaration), which is what a new counter starts with, so deleting
	// it changes no decision; or it has no bucket in force (none kept, or
	// no rate in force: a rate set again later starts full). It never
	// waits for a counter an admission holds (it skips it) and never
	// makes an admission wait long. A p that CounterSweepParams.Validate
	// refuses is refused with its error.
	SweepCounters(ctx context.Context, p *CounterSweepParams) (*CounterSweep, error)
}

// ReceiveParams are the inputs of AdmittingQueue.ReceiveAdmitted.
type ReceiveParams struct {
	// Max bounds the deliveries returned; below 1, 1.
	Max int
	// Part and Parts restrict the receive to one partition as
	// transport.PartitionedConsumer.ReceivePartition does (Parts < 2:
	// every message).
	Part, Parts int
	// Limits are the limits in force, as in AdmitParams.
	Limits map[string]Limit
	// Needs returns the counters a message needs (nil: none, admitted
	// at once). It is called inside the store's transaction: it must be
	// quick and must not call the store.
	// Keys must pass ValidateLimitText: a bad one fails the receive with
	// an error wrapping ErrRejected, so a caller maps hostile text (from a
	// header, say) to a valid key first.
	Needs func(*transport.Envelope) []LimitKey
	// Covering names limits of Limits that every message the caller
	// consumes needs, with one counter (Key ""): once such a counter
	// admits nothing more in a receive (its cap reached, or no whole
	// token), no later message could be admitted, and the receive looks
	// at no further window. A message the caller does not consume is then
	// left for a later receive. Since every message needs them, a store
	// may lock their counters before it reads the window (pgstore does,
	// when every limit in force covers). Nil: none.
	Covering []string
	// Fair, when set, decides on a window in fair order
	// (docs/flow-control.md) instead of the queue's, in one page: the
	// shares (transport.HeaderFairnessKey, read by transport.FairnessOf)
	// are served by start-time fair queueing, weighted by
	// transport.HeaderFairnessWeight, each share's messages by
	// transport.HeaderPriority (higher first), then the queue's order. A
	// message whose partition key has an earlier visible message outside
	// the window is left out, and the messages of one key keep their
	// queue order. admit.FairWindow is the reference, over each share's
	// first window-size messages. The store keeps the fair clock between
	// receives, and may build indexes for fair receives at the first.
	Fair bool
	// Changed, when set, ends the receive's wait when it is closed (the
	// limits in force changed): ReceiveAdmitted then returns no delivery
	// and no error, so that its caller receives again under the new
	// values. It interrupts only the wait, never a transaction.
	Changed <-chan struct{}
}

// AdmittingQueue is a store.Queue (and Limiter) that admits inside its
// receive.
type AdmittingQueue interface {
	Queue
	Limiter
	// ReceiveAdmitted is ReceivePartition(p.Part, p.Parts) that admits as
	// it leases, in one transaction. It looks at a bounded window of the
	// visible messages, in Receive's order (Max of them; when a full
	// window admitted fewer than Max, it pages on past the last row seen,
	// in the same transaction, in windows of 4 × Max, up to 8 windows in
	// all, keeping a refused key blocked across pages, and stopping once
	// a Covering counter is full), and leases those admitted: a
	// message refused stays in the queue, not leased (its
	// Attempt not counted), and so does every later message of its
	// partition key in this receive, so that a refused message never
	// lets a later one of its key overtake it. A refused message gets its
	// refusal recorded on its row (the counter it waits for, see
	// LimitUse.Waiting and AdmissionWaiter), written only when it
	// changes: a receive that refuses nothing writes nothing more than
	// the holds and the leases. An admitted delivery's
	// holds have its Token as Holder, expire with its lease, are extended
	// by ExtendLeases, and are released by Ack, Nack and a unit of work's
	// Consume (in its commit). It waits as Receive does when nothing is
	// admitted; when messages wait only for a rate, it wakes when the
	// earliest token is due. Deliveries of Receive carry no holds, and
	// settling them costs nothing more than before.
	ReceiveAdmitted(ctx context.Context, p *ReceiveParams) ([]transport.Delivery, error)
}

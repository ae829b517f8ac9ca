package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/store"
)

// replicaRetention is how long a replica's record is kept after its last
// beat, whatever its state: a replica that stopped or went away stays
// listed (as stopped or gone) for a day, then a running replica's
// heartbeat prunes it; a replaced one goes sooner (replacedRetention).
const replicaRetention = 24 * time.Hour

// replacedRetention is how long the record of a gone replica that a
// running replica replaced (it started after that replica's last beat) is
// kept after its last beat: it needs no one's attention (IdemReplicaGone
// does not count it), so its record goes sooner than replicaRetention,
// which still keeps a gone replica that nothing replaced listed, and
// alerting, while the capacity is missing.
const replacedRetention = time.Hour

// replacedScan bounds how many records one prune reads to find replaced
// ones; those past it go at a later prune, or after replicaRetention.
const replacedScan = 1000

// pruneEvery is how many beats pass between two prunes.
const pruneEvery = 60

// maxSummaryValue bounds each value of the configuration summary, in bytes.
const maxSummaryValue = 512

// heartbeat is the background service that writes this replica's
// store.Replica every Config.HeartbeatInterval from Start, and a final one
// with StoppedAt when the engine stops cleanly (Stop, or the end of the
// context given to Start); after a failed loop it writes none, so the
// replica is listed as gone. It is also an observer: each committed unit
// of work sets the replica's last batch and lag, with two atomic stores.
// On a store that is no store.ReplicaRegistry it does nothing.
type heartbeat struct {
	quiet
	*base
	rr  store.ReplicaRegistry // nil: no heartbeats
	id  string
	reg *registry // set by Engine.services
	// definitions are the fingerprints of the definitions recorded at
	// Start, by saga type (Replica.Definitions); set by Start.
	definitions map[string]string

	lastBatch atomic.Int64 // Unix nanoseconds; 0 before the first batch
	lag       atomic.Int64 // nanoseconds
}

// newHeartbeat resolves the store's capability once, and draws the
// replica's random ID: an engine starts at most once, so this is one ID
// per start.
func newHeartbeat(b *base) *heartbeat {
	rr, _ := b.store.(store.ReplicaRegistry)
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	return &heartbeat{base: b, rr: rr, id: hex.EncodeToString(id[:])}
}

// ReplicaID returns the random ID under which this engine reports itself
// in its heartbeats (store.Replica.ID), drawn by NewEngine: each engine,
// hence each start, has its own.
func (e *Engine) ReplicaID() string { return e.beat.id }

// committed records the time of the unit of work and the age of its
// oldest message.
func (h *heartbeat) committed(a *attempt, _ time.Duration, _ int) {
	now := h.cfg.Clock()
	var oldest time.Time
	for _, it := range a.items {
		if at := it.d.Envelope.SentAt; !at.IsZero() && (oldest.IsZero() || at.Before(oldest)) {
			oldest = at
		}
	}
	lag := time.Duration(0)
	if !oldest.IsZero() && now.After(oldest) {
		lag = now.Sub(oldest)
	}
	h.lag.Store(int64(lag))
	h.lastBatch.Store(now.UnixNano())
}

// finalBeatTimeout bounds the last beat of a clean stop.
const finalBeatTimeout = time.Second

// run beats until ctx ends, then writes the final beat unless a loop
// failed.
func (h *heartbeat) run(ctx context.Context) error {
	if h.rr == nil {
		return nil
	}
	r := h.replica()
	h.beat(ctx, r, true)
	n := 0
	repeat(ctx, h.cfg.HeartbeatInterval, func(ctx context.Context) {
		n++
		h.beat(ctx, r, n%pruneEvery == 0)
	})
	if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return nil // a loop failed: no clean stop to report
	}
	// Bounded by a second, not the interval: Stop waits for it, and a
	// store that hangs must not hold Stop past its deadline for long.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(h.cfg.HeartbeatInterval, finalBeatTimeout))
	defer cancel()
	r.StoppedAt = h.cfg.Clock()
	h.beat(fctx, r, false)
	return nil
}

// beat writes r with the current counters, and prunes old replicas when
// prune is set. Failures are logged: a missed beat does not stop the
// engine.
func (h *heartbeat) beat(ctx context.Context, r *store.Replica, prune bool) {
	r.BeatAt = h.cfg.Clock()
	if !r.StoppedAt.IsZero() {
		r.BeatAt = r.StoppedAt
	}
	if ns := h.lastBatch.Load(); ns != 0 {
		r.LastBatchAt = time.Unix(0, ns)
	}
	r.Lag = time.Duration(h.lag.Load())
	if h.shares != nil && r.Config != nil {
		// Whether it offers a share is decided at each beat.
		h.shares.advertise(r.Config, r.BeatAt)
	}
	err := h.rr.Heartbeat(ctx, r)
	if err != nil && ctx.Err() == nil {
		h.log.WarnContext(ctx, "write the replica's heartbeat", "replica", r.ID, "error", err)
	}
	if ctx.Err() == nil {
		// A beat is a write: after a failover it clears Ready's refusal
		// on an engine that has nothing to commit (beside a broker, its
		// receives write nothing to the store).
		h.health.beat(err)
	}
	if !prune {
		return
	}
	if _, err := h.rr.PruneReplicas(ctx, r.BeatAt.Add(-replicaRetention)); err != nil && ctx.Err() == nil {
		h.log.WarnContext(ctx, "prune old replicas", "error", err)
	}
	if err := h.pruneReplaced(ctx, r); err != nil && ctx.Err() == nil {
		h.log.WarnContext(ctx, "prune replaced replicas", "error", err)
	}
}

// pruneReplaced removes the records of the gone replicas that r, alive,
// replaced (it started after their last beat) more than replacedRetention
// after their last beat; each only as it was read
// (store.ReplicaRegistry.RemoveReplicas), so one that beats again is kept.
func (h *heartbeat) pruneReplaced(ctx context.Context, r *store.Replica) error {
	rs, err := h.rr.Replicas(ctx, replacedScan)
	if err != nil {
		return fmt.Errorf("list replicas: %w", err)
	}
	var marks []store.ReplicaMark
	for i := range rs {
		x := &rs[i]
		if x.ID != r.ID && x.State(r.BeatAt) == store.ReplicaGone && x.BeatAt.Before(r.StartedAt) && r.BeatAt.Sub(x.BeatAt) > replacedRetention {
			marks = append(marks, store.ReplicaMark{ID: x.ID, BeatAt: x.BeatAt})
		}
	}
	if len(marks) == 0 {
		return nil
	}
	if _, err := h.rr.RemoveReplicas(ctx, marks); err != nil {
		return fmt.Errorf("remove replicas: %w", err)
	}
	return nil
}

// replica describes this engine as its heartbeats report it.
func (h *heartbeat) replica() *store.Replica {
	host, _ := os.Hostname()
	return &store.Replica{
		ID: h.id, Host: printable(host), Version: buildVersion(), StartedAt: h.cfg.Clock(),
		Config: h.summary(), Lanes: h.cfg.Lanes, Consumers: h.cfg.Consumers, Interval: h.cfg.HeartbeatInterval,
		Definitions: maps.Clone(h.definitions),
	}
}

// summary is the configuration summary of the heartbeats: the settings
// that shape the engine's work, and the types of its store and transport.
// It holds no address, name of a database or secret.
func (h *heartbeat) summary() map[string]string {
	c := &h.cfg
	out := map[string]string{
		"batch_size":          strconv.Itoa(c.BatchSize),
		"lanes":               strconv.Itoa(c.Lanes),
		"consumers":           strconv.Itoa(c.Consumers),
		"partitioned_receive": strconv.FormatBool(c.PartitionedReceive),
		"max_attempts":        strconv.Itoa(c.MaxAttempts),
		"retry":               c.RetryBase.String() + ".." + c.RetryMax.String(),
		"dedup":               c.Dedup.String(),
		"retention":           c.Retention.String(),
		"store":               fmt.Sprintf("%T", h.store),
		"transport":           fmt.Sprintf("%T", h.tr),
	}
	if h.reg != nil {
		out["sagas"] = joinBounded(slices.Sorted(maps.Keys(h.reg.sagas)))
		out["handlers"] = joinBounded(slices.Sorted(maps.Keys(h.reg.handlers)))
		out["schedules"] = strconv.Itoa(len(h.reg.schedules))
	}
	return out
}

// joinBounded joins names with commas, cut to maxSummaryValue bytes (at a
// character boundary) and marked with "…" when cut.
func joinBounded(names []string) string {
	s := printable(strings.Join(names, ","))
	if len(s) <= maxSummaryValue {
		return s
	}
	cut := maxSummaryValue
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// printable makes s storable by every store: valid UTF-8 without U+0000.
func printable(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// buildVersion is the main module's version and VCS revision, and Idem's
// version when it is a dependency, from the binary's build information.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Path + " " + bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v += " " + s.Value
		case "vcs.modified":
			if s.Value == "true" {
				v += "-dirty"
			}
		}
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/idemhq/idem" {
			v += ", idem " + d.Version
		}
	}
	return printable(strings.TrimSpace(v + " (" + bi.GoVersion + ")"))
}

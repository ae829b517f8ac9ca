package idem

import (
	"context"
	"log/slog"
	"time"

	"github.com/idemhq/idem/internal/backoff"
)

// loopPauseMax caps the pause of a loop that keeps failing (the consume
// loop's receive, the relay, the timers), below Config.RetryMax: a loop
// must notice within seconds that its store or transport is back.
const loopPauseMax = 10 * time.Second

// repeatEvery is how often an error that repeats unchanged is logged
// again, with the count of its repeats.
const repeatEvery = time.Minute

// failures paces a loop whose store or transport keeps failing, and keeps
// its log short. Each failure in a row pauses longer (Config.RetryBase,
// doubling, with jitter, up to Config.RetryMax or loopPauseMax, whichever
// is lower), and a success starts over. An error is logged when it first
// occurs and when its text changes; while it repeats unchanged, one line
// a minute gives the count ("repeated N times in the last …"), and the
// success that ends it gives the rest. One loop owns it: it is not safe
// for concurrent use.
type failures struct {
	log      *slog.Logger
	level    slog.Level
	msg      string
	pause    backoff.Policy
	n        int       // failures in a row
	text     string    // the error last logged
	since    time.Time // when it, or its repeats, were last logged
	repeated int       // repeats of text not logged yet
}

func newFailures(b *base, level slog.Level, msg string) *failures {
	return &failures{log: b.log, level: level, msg: msg,
		pause: backoff.Policy{Base: b.cfg.RetryBase, Max: min(b.cfg.RetryMax, loopPauseMax)}}
}

// failed records err and returns how long the loop pauses before it
// tries again.
func (f *failures) failed(ctx context.Context, err error) time.Duration {
	f.n++
	now := time.Now()
	switch text := err.Error(); {
	case text != f.text:
		f.flush(ctx, now)
		f.log.Log(ctx, f.level, f.msg, "error", err, "failures_in_a_row", f.n)
		f.text, f.since = text, now
	default:
		f.repeated++
		if now.Sub(f.since) >= repeatEvery {
			f.flush(ctx, now)
		}
	}
	return f.pause.Delay(f.n)
}

// ok records a success: the next failure pauses the least again, and the
// repeats not logged yet are.
func (f *failures) ok(ctx context.Context) {
	if f.n == 0 {
		return
	}
	f.flush(ctx, time.Now())
	f.log.InfoContext(ctx, f.msg+": recovered", "failures_in_a_row", f.n)
	f.n, f.text = 0, ""
}

// report records the outcome of one try: ok for a nil err, failed
// otherwise (for a loop that does not pause).
func (f *failures) report(ctx context.Context, err error) {
	if err == nil {
		f.ok(ctx)
	} else {
		f.failed(ctx, err)
	}
}

// flush logs the repeats of the last error not logged yet.
func (f *failures) flush(ctx context.Context, now time.Time) {
	if f.repeated == 0 {
		return
	}
	f.log.Log(ctx, f.level, f.msg+": the same error repeated", "error", f.text, "repeats", f.repeated, "over", now.Sub(f.since).Round(time.Millisecond))
	f.repeated, f.since = 0, now
}

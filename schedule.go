package idem

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/robfig/cron/v3"

	"github.com/idemhq/idem/internal/ids"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Headers of a scheduled message.
const (
	// HeaderSchedule carries the name of the schedule that sent the message.
	HeaderSchedule = "idem-schedule"
	// HeaderScheduleTick carries the tick time the message stands for, in
	// RFC 3339 with nanoseconds, UTC.
	HeaderScheduleTick = "idem-schedule-tick"
)

// TaskSchedules names the background pass that fires due schedules.
const TaskSchedules BackgroundTask = "schedules"

// maxScheduleName bounds a schedule's name, in bytes.
const maxScheduleName = 200

// defaultGrace is how late a tick of a SkipMissed schedule may fire when
// SkipMissed was given no grace.
const defaultGrace = time.Minute

// everyPrefix marks an Every schedule's spec: "@every 1m0s".
const everyPrefix = "@every "

// ScheduleOption changes a schedule registered with Engine.Every or
// Engine.Cron.
type ScheduleOption func(*scheduleDef)

// SkipMissed makes the schedule send nothing for ticks it missed: a tick
// found due more than grace after its time (every replica was down, or
// the schedule was paused) is skipped, and the schedule resumes at its
// next tick in the future. Zero grace means one minute; a grace shorter
// than Config.TimerInterval is refused at registration (polls find most
// ticks later than that, so most would be skipped). Without this option a
// schedule catches up with one message, for the latest missed tick
// (store.MissedFireOnce).
func SkipMissed(grace time.Duration) ScheduleOption {
	return func(d *scheduleDef) {
		d.missed, d.grace = store.MissedSkip, grace
		if grace <= 0 {
			d.grace = defaultGrace
		}
	}
}

// scheduleDef is a schedule registered on this engine, saved at Start.
type scheduleDef struct {
	name, spec string
	msg        any
	missed     string
	grace      time.Duration
}

// Every registers a schedule that publishes msg every interval, on the
// multiples of interval since the Unix epoch (Every(time.Hour) ticks on
// the hour), so that every replica computes the same ticks. See Cron for
// what a tick publishes and how replicas share a schedule. interval is
// rounded down to microseconds and must be at least Config.TimerInterval
// (and 1ms): ticks are fired by a poll every TimerInterval, and a poll
// fires one tick per schedule, the latest due, so a shorter interval would
// send one message per poll, not per interval. Even at TimerInterval, a
// pass that runs late can miss a tick (it then follows the missed-tick
// policy); an interval of twice TimerInterval leaves a poll in every
// interval of a healthy replica.
func (e *Engine) Every(name string, interval time.Duration, msg any, opts ...ScheduleOption) error {
	if interval < time.Millisecond {
		return fmt.Errorf("idem: every %q: interval %s is below 1ms", name, interval)
	}
	return e.addSchedule(name, everyPrefix+interval.Truncate(time.Microsecond).String(), msg, opts)
}

// Cron registers a schedule that publishes msg at the times of spec, a
// standard five-field cron expression ("30 2 * * *": 02:30 every day) or a
// descriptor (@hourly, @daily, @weekly, @monthly, @yearly, @every 90s), in
// UTC unless spec starts with CRON_TZ=Area/City. "@every d" is Every(d),
// with its minimum; ticks of an expression closer together than
// Config.TimerInterval (a minute apart, with a TimerInterval above a
// minute) are fired like missed ticks: one per poll.
//
// Schedules are saved in the store at Start: registering the same name on
// every replica is idempotent (a changed spec moves the next tick; a
// schedule paused by an operator stays paused). Each tick publishes one
// copy of msg whose ID is derived from (name, tick time), with the
// headers HeaderSchedule and HeaderScheduleTick. The replica that claims a
// tick advances the schedule and publishes (into the store's queue, or its
// outbox) in one transaction, so a tick fires once across replicas and a
// crash neither loses nor repeats it; were it sent twice anyway, its ID is
// the same, and consumers deduplicate it. Ticks are checked every
// Config.TimerInterval. The store must implement store.Scheduler
// (memstore, sqlitestore and pgstore do).
func (e *Engine) Cron(name, spec string, msg any, opts ...ScheduleOption) error {
	r, err := parseSpec(spec)
	if err != nil {
		return fmt.Errorf("idem: cron %q: %w", name, err)
	}
	if r.next(e.cfg.Clock()).IsZero() {
		// robfig/cron gives up after five years: "0 0 30 2 *" (30 February)
		// would otherwise be due at the zero time on every poll.
		return fmt.Errorf("idem: cron %q: spec %q never matches a date", name, spec)
	}
	return e.addSchedule(name, spec, msg, opts)
}

func (e *Engine) addSchedule(name, spec string, msg any, opts []ScheduleOption) error {
	if err := ValidateScheduleName(name); err != nil {
		return fmt.Errorf("idem: schedule: %w", err)
	}
	if _, err := NewEnvelope("probe", msg); err != nil {
		return fmt.Errorf("idem: schedule %q: %w", name, err)
	}
	if e.caps.scheduler == nil {
		return fmt.Errorf("idem: schedule %q: store %T does not keep schedules (store.Scheduler)", name, e.store)
	}
	d := &scheduleDef{name: name, spec: spec, msg: msg, missed: store.MissedFireOnce}
	for _, o := range opts {
		o(d)
	}
	if err := checkPollInterval(d, e.cfg.TimerInterval); err != nil {
		return fmt.Errorf("idem: schedule %q: %w", name, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return ErrRunning
	}
	return e.reg.addSchedule(d)
}

// checkPollInterval refuses an Every interval or a SkipMissed grace
// shorter than the poll interval (see Every and SkipMissed).
func checkPollInterval(d *scheduleDef, poll time.Duration) error {
	r, err := parseSpec(d.spec) // checked by Every and Cron
	if err != nil {
		return err
	}
	if ev, ok := r.(every); ok && time.Duration(ev.us)*time.Microsecond < poll {
		return fmt.Errorf("interval %s is below Config.TimerInterval (%s), the minimum: each poll fires one tick per schedule, so ticks would coalesce; lower TimerInterval or lengthen the interval",
			time.Duration(ev.us)*time.Microsecond, poll)
	}
	if d.missed == store.MissedSkip && d.grace < poll {
		return fmt.Errorf("SkipMissed grace %s is below Config.TimerInterval (%s), the minimum: polls find ticks up to TimerInterval late, so most ticks would be skipped; lower TimerInterval or lengthen the grace",
			d.grace, poll)
	}
	return nil
}

// ValidateScheduleName reports why name cannot name a schedule: empty,
// longer than 200 bytes, not UTF-8, or holding control characters.
func ValidateScheduleName(name string) error {
	switch {
	case name == "":
		return errors.New("empty schedule name")
	case len(name) > maxScheduleName:
		return fmt.Errorf("schedule name of %d bytes: the limit is %d", len(name), maxScheduleName)
	case !utf8.ValidString(name):
		return fmt.Errorf("schedule name %q is not valid UTF-8", name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("schedule name %q holds a control character", name)
	}
	return nil
}

// saveSchedules stores the registered schedules; Start calls it.
func saveSchedules(ctx context.Context, b *base, reg *registry) error {
	if len(reg.schedules) == 0 {
		return nil
	}
	now := b.cfg.Clock()
	for _, d := range reg.schedules {
		r, _ := parseSpec(d.spec) // checked by Every and Cron
		env, err := reg.template(d.msg)
		if err != nil {
			return fmt.Errorf("idem: start: schedule %q: %w", d.name, err)
		}
		s := &store.Schedule{Name: d.name, Spec: d.spec, Missed: d.missed, Grace: d.grace, Envelope: env, NextDue: r.next(now), UpdatedAt: now}
		if err := b.caps.scheduler.SaveSchedule(ctx, s); err != nil {
			return fmt.Errorf("idem: start: save schedule %q: %w", d.name, err)
		}
	}
	return nil
}

// recurrence is a parsed spec. Tick times have microsecond precision
// (what every store keeps).
type recurrence interface {
	// next returns the first tick strictly after t.
	next(t time.Time) time.Time
	// latest returns the last tick at or before now, given from, a tick at
	// or before now.
	latest(from, now time.Time) time.Time
}

// every ticks on the multiples of a period since the Unix epoch.
type every struct{ us int64 }

func (e every) next(t time.Time) time.Time {
	u := t.UnixMicro()
	return time.UnixMicro((u/e.us + 1) * e.us).UTC()
}

func (e every) latest(from, now time.Time) time.Time {
	l := time.UnixMicro(now.UnixMicro() / e.us * e.us).UTC()
	if l.Before(from) {
		return from
	}
	return l
}

// cronSpec ticks at the times of a cron expression.
type cronSpec struct{ s cron.Schedule }

func (c cronSpec) next(t time.Time) time.Time {
	return c.s.Next(t.UTC()).UTC().Truncate(time.Microsecond)
}

// latest walks the ticks from from: its cost grows with the ticks missed
// (a cron expression ticks at most once a minute).
func (c cronSpec) latest(from, now time.Time) time.Time {
	last := from
	for n := c.next(from); !n.After(now) && !n.IsZero(); n = c.next(n) {
		last = n
	}
	return last
}

// parseSpec parses "@every <duration>" (at least 1ms, rounded down to
// microseconds) or a cron expression.
func parseSpec(spec string) (recurrence, error) {
	if rest, ok := strings.CutPrefix(spec, everyPrefix); ok {
		d, err := time.ParseDuration(rest)
		if err != nil || d < time.Millisecond {
			return nil, fmt.Errorf("spec %q: want @every and a duration of at least 1ms", spec)
		}
		return every{us: d.Microseconds()}, nil
	}
	if !utf8.ValidString(spec) || strings.IndexFunc(spec, unicode.IsControl) >= 0 {
		return nil, fmt.Errorf("spec %q: not printable UTF-8", spec)
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("spec %q: %w", spec, err)
	}
	return cronSpec{s}, nil
}

// FireSchedule fires schedule name's next tick now, instead of at its
// time, and advances the schedule to the tick after it: an operator's
// "fire now". The tick's message has the ID TickID(name, tick), the one
// a replica firing that tick on time derives, and the advance commits
// only if no replica advanced the schedule meanwhile (the error then
// wraps store.ErrConflict): the tick is sent once either way. When tick
// is not zero, it is the tick the caller means (the next tick it was
// shown): a schedule whose next tick is another one is not fired, and the
// error wraps store.ErrConflict; a zero tick fires whatever tick is next.
// A paused schedule is fired too, and stays paused. The error wraps
// store.ErrNotFound when there is no such schedule.
func (e *Engine) FireSchedule(ctx context.Context, name string, tick time.Time) (*FiredTick, error) {
	if err := ValidateScheduleName(name); err != nil {
		return nil, err
	}
	return e.firer.fireNow(ctx, name, tick)
}

// TickID is the message ID of schedule name's tick at tick: every replica
// derives the same one.
func TickID(name string, tick time.Time) string {
	return ids.Derive("schedule", name, tick.UTC().Format(time.RFC3339Nano))
}

// planTick decides what a due schedule does at now: which tick it fires
// (the latest due one; none when MissedSkip finds it later than its grace)
// and its next due time, the first tick after now. It reads the stored
// row alone, and refuses a row it cannot read exactly (unplanned).
func planTick(s *store.Schedule, now time.Time) (store.ScheduleAdvance, *Envelope, error) {
	r, err := parseSpec(s.Spec)
	if err != nil {
		return store.ScheduleAdvance{}, nil, err
	}
	if s.Missed != store.MissedFireOnce && s.Missed != store.MissedSkip {
		return store.ScheduleAdvance{}, nil, fmt.Errorf("schedule %q: missed-tick policy %q unknown to this version", s.Name, s.Missed)
	}
	if s.Envelope.Type == "" {
		return store.ScheduleAdvance{}, nil, fmt.Errorf("schedule %q: its message template has no type", s.Name)
	}
	last := r.latest(s.NextDue, now)
	adv := store.ScheduleAdvance{Name: s.Name, From: s.NextDue, To: r.next(last)}
	if s.NextDue.IsZero() || adv.To.IsZero() {
		// A spec that never matches (saved by an older version, say):
		// nothing to fire, ever.
		return store.ScheduleAdvance{}, nil, fmt.Errorf("schedule %q: spec %q has no next tick", s.Name, s.Spec)
	}
	if s.Missed == store.MissedSkip && now.Sub(last) > s.Grace {
		return adv, nil, nil
	}
	adv.Fired = last
	env := s.Envelope.Clone()
	env.ID = TickID(s.Name, last)
	env.SentAt = now
	if env.Headers == nil {
		env.Headers = map[string]string{}
	}
	env.Headers[HeaderSchedule] = s.Name
	env.Headers[HeaderScheduleTick] = last.UTC().Format(time.RFC3339Nano)
	if err := transport.ValidateEnvelope(&env); err != nil {
		return store.ScheduleAdvance{}, nil, err
	}
	return adv, &env, nil
}

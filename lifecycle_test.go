package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

func TestLifecycleErrors(t *testing.T) {
	t.Parallel()
	st, mem := memstore.New(nil), memtransport.New(nil)
	t.Cleanup(func() { _ = mem.Close(); _ = st.Close() })
	ctx := context.Background()
	e, err := idem.NewEngine(st, mem, &idem.Config{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(ctx); err != nil {
		t.Errorf("Stop before Start = %v, want nil", err)
	}
	if err := e.Start(ctx); err == nil || errors.Is(err, idem.ErrRunning) {
		t.Fatalf("Start with nothing registered = %v, want an error that is not ErrRunning", err)
	}
	m := newCounter(nil)
	if err := e.Register(m); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := e.Register(m); err == nil {
		t.Error("Register of the same saga type twice: got nil error")
	}
	if err := e.Handle(incType, func(context.Context, idem.Envelope) error { return nil }); err == nil {
		t.Error("Handle of a type the saga consumes: got nil error")
	}
	if err := e.Handle(auditType, func(context.Context, idem.Envelope) error { return nil }); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if err := e.Handle(auditType, func(context.Context, idem.Envelope) error { return nil }); err == nil {
		t.Error("Handle of one type twice: got nil error")
	}
	if err := e.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := e.Start(ctx); !errors.Is(err, idem.ErrRunning) {
		t.Errorf("second Start = %v, want ErrRunning", err)
	}
	if err := e.Register(newCounterNamed("other")); !errors.Is(err, idem.ErrRunning) {
		t.Errorf("Register after Start = %v, want ErrRunning", err)
	}
	if err := e.Handle("late.Type", func(context.Context, idem.Envelope) error { return nil }); !errors.Is(err, idem.ErrRunning) {
		t.Errorf("Handle after Start = %v, want ErrRunning", err)
	}
	if got := e.Sagas(); len(got) != 1 || got[counterType] == nil {
		t.Errorf("Sagas() = %v, want the counter", got)
	}
	if err := e.Stop(ctx); err != nil {
		t.Errorf("Stop = %v, want nil", err)
	}
	if err := e.Stop(ctx); err != nil {
		t.Errorf("second Stop = %v, want nil", err)
	}
	select {
	case <-e.Done():
	default:
		t.Error("Done not closed after Stop")
	}
	if err := e.Start(ctx); !errors.Is(err, idem.ErrStopped) {
		t.Errorf("Start after Stop = %v, want ErrStopped", err)
	}
}

// newCounterNamed is a one-state machine under another saga type name.
func newCounterNamed(name string) *saga.Machine[Counter] {
	type Other struct {
		Key string `json:"key"`
	}
	m := saga.New[Counter](name)
	s := m.State("S")
	ev := saga.NewEvent[Other](m, func(o Other) string { return o.Key })
	m.Initially(saga.When(ev).TransitionTo(s))
	return m
}

// Stop lets the batch in flight finish: it returns only after the blocked
// handler is released, and the message is acknowledged by then.
func TestStopWaitsForInFlightBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		entered := make(chan string, 1)
		release := make(chan struct{})
		var calls atomic.Int64
		b := setup(t, &options{handlers: map[string]idem.HandlerFunc{auditType: func(_ context.Context, env idem.Envelope) error {
			calls.Add(1)
			entered <- env.ID
			<-release
			return nil
		}}})
		b.publish(auditEnv("a-1"))
		<-entered

		stopped := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			stopped <- b.engine().Stop(ctx)
		}()
		synctest.Wait() // Stop is blocked, and so is the handler
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned (%v) while the handler was still running", err)
		default:
		}
		close(release)
		if err := <-stopped; err != nil {
			t.Fatalf("Stop = %v, want nil", err)
		}
		if p := b.mem.Unsettled(); p != 0 {
			t.Errorf("pending %d after Stop, want 0: the in-flight message must be acknowledged", p)
		}
		if got := calls.Load(); got != 1 {
			t.Errorf("handler ran %d times, want 1", got)
		}
		if s := b.engine().Stats(); s.Applied != 1 {
			t.Errorf("stats %+v: want Applied 1", s)
		}
	})
}

// Stop with a context that is already done cancels the work in flight and
// returns the context's error; the message is not acknowledged and a new
// engine handles it later.
func TestStopWithDoneContextRedelivers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		entered := make(chan struct{}, 1)
		var first, second atomic.Int64
		b := setup(t, &options{handlers: map[string]idem.HandlerFunc{auditType: func(ctx context.Context, env idem.Envelope) error {
			first.Add(1)
			entered <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}}})
		b.publish(auditEnv("a-1"))
		<-entered
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := b.engine().Stop(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Stop(cancelled ctx) = %v, want context.Canceled", err)
		}
		if p := b.mem.Unsettled(); p != 1 {
			t.Fatalf("pending %d after an aborted Stop, want 1", p)
		}

		b2 := setup(t, &options{shareStore: b.mstore, shareMem: b.mem, handlers: map[string]idem.HandlerFunc{auditType: func(_ context.Context, env idem.Envelope) error {
			second.Add(1)
			return nil
		}}})
		b2.settle()
		if got := first.Load(); got != 1 {
			t.Errorf("first engine's handler ran %d times, want 1", got)
		}
		if got := second.Load(); got != 1 {
			t.Errorf("second engine's handler ran %d times, want 1", got)
		}
		if dls := b2.deadLetters(); len(dls) != 0 {
			t.Errorf("got dead letters %+v, want none", dls)
		}
	})
}

// A full run — several engines, faults, timers — leaves no goroutine
// behind once the engines are stopped and the transport closed.
func TestEngineLeavesNoGoroutines(t *testing.T) {
	// Not parallel: it compares goroutines before and after.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs after setup's cleanup
	b := setup(t, &options{
		replicas: 2,
		mem:      memtransport.Config{Duplicate: 1, Lease: 50 * time.Millisecond, LoseAckRate: 0.2},
		cfg:      idem.Config{TimerInterval: time.Millisecond, RelayInterval: time.Millisecond, SweepInterval: time.Millisecond},
	})
	for i := range 20 {
		b.send("inc-"+string(rune('a'+i)), Inc{Key: "k", N: 1})
	}
	b.settle()
	if c, _ := b.counter("k"); c.Total != 20 {
		t.Errorf("got total %d, want 20", c.Total)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	st, mem := memstore.New(nil), memtransport.New(nil)
	t.Cleanup(func() { _ = mem.Close(); _ = st.Close() })
	for _, tc := range []struct {
		field string
		set   func(*idem.Config)
	}{
		{"BatchSize", func(c *idem.Config) { c.BatchSize = -1 }},
		{"Lanes", func(c *idem.Config) { c.Lanes = -1 }},
		{"MaxAttempts", func(c *idem.Config) { c.MaxAttempts = -1 }},
		{"RetryBase", func(c *idem.Config) { c.RetryBase = -time.Millisecond }},
		{"RetryMax", func(c *idem.Config) { c.RetryMax = -time.Millisecond }},
		{"ConflictRetries", func(c *idem.Config) { c.ConflictRetries = -1 }},
		{"MaxKeyLen", func(c *idem.Config) { c.MaxKeyLen = -1 }},
		{"MaxBodyBytes", func(c *idem.Config) { c.MaxBodyBytes = -1 }},
		{"Retention", func(c *idem.Config) { c.Retention = -time.Hour }},
		{"OutboxRetention", func(c *idem.Config) { c.OutboxRetention = -time.Hour }},
		{"SweepInterval", func(c *idem.Config) { c.SweepInterval = -time.Second }},
		{"SweepBatch", func(c *idem.Config) { c.SweepBatch = -1 }},
		{"TimerInterval", func(c *idem.Config) { c.TimerInterval = -time.Second }},
		{"RelayInterval", func(c *idem.Config) { c.RelayInterval = -time.Second }},
		{"RelayAge", func(c *idem.Config) { c.RelayAge = -time.Second }},
		{"ClaimLease", func(c *idem.Config) { c.ClaimLease = -time.Second }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			var c idem.Config
			tc.set(&c)
			e, err := idem.NewEngine(st, mem, &c)
			if err == nil || e != nil {
				t.Fatalf("NewEngine with negative %s = %v, %v; want nil and an error", tc.field, e, err)
			}
			if !strings.Contains(err.Error(), "Config."+tc.field+" ") {
				t.Errorf("error %q does not name Config.%s", err, tc.field)
			}
		})
	}
	t.Run("RetryMax below RetryBase", func(t *testing.T) {
		_, err := idem.NewEngine(st, mem, &idem.Config{RetryBase: time.Second, RetryMax: time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "RetryMax") {
			t.Fatalf("NewEngine = %v, want an error naming RetryMax", err)
		}
	})
	t.Run("zero and nil", func(t *testing.T) {
		for _, c := range []*idem.Config{nil, {}} {
			if _, err := idem.NewEngine(st, mem, c); err != nil {
				t.Errorf("NewEngine(%v) = %v, want the defaults", c, err)
			}
		}
	})
	t.Run("missing store or transport", func(t *testing.T) {
		if _, err := idem.NewEngine(nil, mem, nil); err == nil {
			t.Error("NewEngine(nil store): got nil error")
		}
		if _, err := idem.NewEngine(st, nil, nil); err == nil {
			t.Error("NewEngine(nil transport): got nil error")
		}
	})
}

func TestNewEnvelope(t *testing.T) {
	t.Parallel()
	if _, err := idem.NewEnvelope("", Inc{Key: "k"}); !errors.Is(err, idem.ErrInvalidEnvelope) {
		t.Errorf("NewEnvelope with empty ID = %v, want ErrInvalidEnvelope", err)
	}
	if _, err := idem.NewEnvelope("id", make(chan int)); err == nil || errors.Is(err, idem.ErrInvalidEnvelope) {
		t.Errorf("NewEnvelope of an unencodable message = %v, want an encoding error", err)
	}
	env, err := idem.NewEnvelope("id-1", Inc{Key: "k", N: 2})
	if err != nil {
		t.Fatal(err)
	}
	var back Inc
	if err := json.Unmarshal(env.Body, &back); err != nil || back != (Inc{Key: "k", N: 2}) {
		t.Errorf("body %s decodes to %+v (%v), want the message", env.Body, back, err)
	}
	if env.ID != "id-1" || env.Type != incType || env.CorrelationID != "" {
		t.Errorf("envelope %+v: want ID id-1, type %s, no correlation ID", env, incType)
	}

	b := setup(t, nil)
	env = b.env("id-2", Inc{Key: " Cafe\u0301", N: 1})
	if env.CorrelationID != "Caf\u00e9" {
		t.Errorf("Engine.NewEnvelope correlation ID %q, want the canonical saga key", env.CorrelationID)
	}
	if _, err := b.engine().NewEnvelope("", Inc{}); !errors.Is(err, idem.ErrInvalidEnvelope) {
		t.Errorf("Engine.NewEnvelope with empty ID = %v, want ErrInvalidEnvelope", err)
	}
}

func TestPublishValidates(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{noStart: true})
	good := b.env("ok-1", Inc{Key: "k", N: 1})
	for _, tc := range []struct {
		name string
		bad  idem.Envelope
	}{
		{"missing ID", idem.Envelope{Type: incType, Body: []byte(`{}`)}},
		{"missing type", idem.Envelope{ID: "x", Body: []byte(`{}`)}},
	} {
		err := b.engine().Publish(b.ctx, good, tc.bad)
		if !errors.Is(err, idem.ErrInvalidEnvelope) {
			t.Errorf("%s: Publish = %v, want ErrInvalidEnvelope", tc.name, err)
		}
	}
	if p := b.mem.Unsettled(); p != 0 {
		t.Fatalf("an invalid batch published %d messages, want none", p)
	}
	sentAt := epoch.Add(-time.Minute)
	withTime := b.env("ok-2", Inc{Key: "k", N: 1})
	withTime.SentAt = sentAt
	b.publish(good, withTime)
	got := b.rec.sent(incType)
	if len(got) != 2 || !got[0].SentAt.Equal(epoch) || !got[1].SentAt.Equal(sentAt) {
		t.Errorf("published %+v: want SentAt set from the clock when zero, kept otherwise", got)
	}
}

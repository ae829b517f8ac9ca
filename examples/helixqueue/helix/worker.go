package helix

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Work sequences one batch (the GPU part) and returns its result.
type Work func(ctx context.Context, sample string, attempt int) (string, error)

// Worker takes PENDING batches, one at a time, and runs them.
type Worker struct {
	// ID names the worker in assignments and audit rows.
	ID string
	// App is the worker's process.
	App *App
	// Work runs a batch.
	Work Work
	// Metrics, when set, counts lost assignment races.
	Metrics *Metrics
	// Poll is the pause when no batch is pending. Default 100ms.
	Poll time.Duration
}

// Outcome is what RunOne did.
type Outcome struct {
	Sample  string
	Attempt int
	// Ran is true when this worker won a batch and reported its result;
	// Lost when its report came after its assignment was released.
	Ran, Lost bool
}

// RunOne looks for a PENDING batch, tries to win it, and runs it. It
// returns a zero Outcome when no batch was won.
func (w *Worker) RunOne(ctx context.Context) (Outcome, error) {
	samples, err := w.App.DB.PendingBatches(ctx, 8)
	if err != nil {
		return Outcome{}, err
	}
	for _, s := range samples {
		r, err := w.App.TryAssign(ctx, s, w.ID)
		if err != nil {
			return Outcome{}, err
		}
		if !r.Won {
			if w.Metrics != nil {
				w.Metrics.AssignConflicts.Inc()
			}
			continue
		}
		return w.run(ctx, s, r.Attempt)
	}
	return Outcome{}, nil
}

// run starts, works and completes (or fails) one won batch.
func (w *Worker) run(ctx context.Context, sample string, attempt int) (Outcome, error) {
	o := Outcome{Sample: sample, Attempt: attempt}
	r, err := w.App.send(ctx, "start", Start{SampleID: sample, Worker: w.ID, Attempt: attempt})
	if err != nil {
		return o, err
	}
	if b, _ := decodeBatch(r.Data); r.State != Running || b.Attempt != attempt {
		o.Lost = true // the lease expired before the start
		return o, nil
	}
	res, werr := w.Work(ctx, sample, attempt)
	if ctx.Err() != nil {
		return o, ctx.Err() // killed mid-batch: the lease reaper releases it
	}
	var msg any = Complete{SampleID: sample, Worker: w.ID, Attempt: attempt, Result: res}
	if werr != nil {
		msg = Fail{SampleID: sample, Worker: w.ID, Attempt: attempt, Reason: werr.Error()}
	}
	r, err = w.App.send(ctx, "report", msg)
	if err != nil {
		return o, err
	}
	b, _ := decodeBatch(r.Data)
	o.Ran = b.Attempt == attempt && (r.State == Completed || r.State == Failed)
	o.Lost = !o.Ran
	return o, nil
}

// Run runs batches until ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	poll := w.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	for {
		o, err := w.RunOne(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("worker %s: %w", w.ID, err)
		}
		if o.Sample != "" {
			continue
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

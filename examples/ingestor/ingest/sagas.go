package ingest

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
)

// Saga types under which jobs and chunks are stored.
const (
	JobSaga   = "ingestor.job"
	ChunkSaga = "ingestor.chunk"
)

// Job states. Receiving and validating happen inside the job's first
// transition (validation is pure and the chunk commands are committed with
// the new job), so a stored job starts in Queued or Rejected.
const (
	Queued             saga.State = "Queued"
	Rejected           saga.State = "Rejected"
	Processing         saga.State = "Processing"
	Succeeded          saga.State = "Succeeded"
	PartiallySucceeded saga.State = "PartiallySucceeded"
	Failed             saga.State = "Failed"
)

// Chunk states.
const (
	ChunkImported saga.State = "Imported"
	ChunkFailed   saga.State = "Failed"
)

// Chunk result statuses in a job.
const (
	StatusPending  = "pending"
	StatusImported = "imported"
	StatusFailed   = "failed"
)

// Transitions lists every job transition the machine allows: from state,
// to the states it may move to. Anything else is refused: a non-final
// state that gets an event it does not handle fails it with
// saga.ErrUnhandled (the engine dead-letters the message), and the API
// refuses a requeue of a job that is not PartiallySucceeded or Failed.
var Transitions = map[saga.State][]saga.State{
	saga.Initial:       {Queued, Rejected},
	Queued:             {Processing, Succeeded, PartiallySucceeded, Failed},
	Processing:         {Processing, Succeeded, PartiallySucceeded, Failed},
	PartiallySucceeded: {Processing},
	Failed:             {Processing},
}

// ImportRequested asks for an import: the API publishes it with the
// file's idempotency key, so a repeat upload is the same message.
type ImportRequested struct {
	Job      string `json:"job"`
	Supplier string `json:"supplier"`
	Format   string `json:"format"`
	FileName string `json:"file_name,omitempty"`
	// Content is the file's bytes, exactly as uploaded and hashed; in the
	// message body it is base64 (4 bytes for every 3, whatever they are).
	Content   []byte `json:"content"`
	ChunkSize int    `json:"chunk_size"`
	// RequestID marks the HTTP request that published the message, so that
	// among concurrent duplicate uploads exactly one learns it created the
	// job. It is not an identity: the idempotency key is.
	RequestID string `json:"request_id"`
}

// ChunkRequested carries one chunk's lines to the chunk saga.
type ChunkRequested struct {
	Job     string `json:"job"`
	Chunk   int    `json:"chunk"`
	Attempt int    `json:"attempt"`
	Lines   []Line `json:"lines"`
}

// RetryChunk asks a failed chunk to run again (after a requeue).
type RetryChunk struct {
	Job     string `json:"job"`
	Chunk   int    `json:"chunk"`
	Attempt int    `json:"attempt"`
}

// ChunkDone reports a chunk's outcome to its job.
type ChunkDone struct {
	Job      string    `json:"job"`
	Chunk    int       `json:"chunk"`
	Attempt  int       `json:"attempt"`
	OK       bool      `json:"ok"`
	Lines    int       `json:"lines"`
	Problems []Problem `json:"problems,omitempty"`
}

// RequeueRequested re-runs a job's failed chunks. Generation is the job's
// requeue count plus one, so a repeated request is the same message.
type RequeueRequested struct {
	Job        string `json:"job"`
	Generation int    `json:"generation"`
}

// Job is the job saga's state document.
type Job struct {
	ID         string `json:"id"`
	Supplier   string `json:"supplier"`
	Format     string `json:"format"`
	FileName   string `json:"file_name,omitempty"`
	Size       int    `json:"size"`
	Lines      int    `json:"lines"`
	ChunkSize  int    `json:"chunk_size"`
	RequestID  string `json:"request_id"`
	Generation int    `json:"generation"`
	// Problems are why the job was rejected.
	Problems []Problem    `json:"problems,omitempty"`
	Chunks   []ChunkState `json:"chunks,omitempty"`
	// Outcomes records every chunk report applied and every requeue, by
	// the ID of the message that carried it (the journal's MessageID).
	Outcomes []Outcome `json:"outcomes,omitempty"`
}

// ChunkState is what a job knows of one chunk.
type ChunkState struct {
	Index    int    `json:"index"`
	FirstRow int    `json:"first_row"`
	Lines    int    `json:"lines"`
	Status   string `json:"status"`
	Attempt  int    `json:"attempt"`
	// Reports counts the outcome reports applied to the job for this
	// chunk: one per attempt, never more.
	Reports  int       `json:"reports"`
	Problems []Problem `json:"problems,omitempty"`
}

// Outcome is the detail behind one journal entry of a job.
type Outcome struct {
	MessageID string `json:"message_id"`
	Kind      string `json:"kind"` // "chunk" or "requeue"
	// Chunk is the chunk's index (0 included) when Kind is "chunk", nil
	// for a requeue.
	Chunk    *int   `json:"chunk,omitempty"`
	Attempt  int    `json:"attempt,omitempty"`
	Status   string `json:"status,omitempty"`
	Lines    int    `json:"lines,omitempty"`
	Problems int    `json:"problems,omitempty"`
	Requeued []int  `json:"requeued,omitempty"`
}

// Chunk is the chunk saga's state document: the chunk's lines are the
// imported records. The chunk saga stores them in the same commit as the
// inbox record of the message that imported them, so a chunk is applied
// once whatever the redeliveries.
type Chunk struct {
	Job      string    `json:"job"`
	Index    int       `json:"index"`
	Attempt  int       `json:"attempt"`
	Lines    []Line    `json:"lines"`
	Problems []Problem `json:"problems,omitempty"`
}

// ChunkKey is the saga key of chunk i of job.
func ChunkKey(job string, i int) string { return job + "/" + fmt.Sprintf("%06d", i) }

// Depots is the set of depot codes that lines may name; a line for another
// depot fails its chunk (the depot is not onboarded yet). It is safe for
// concurrent use.
type Depots struct {
	mu  sync.RWMutex
	set map[string]bool
}

// NewDepots returns a set holding codes.
func NewDepots(codes ...string) *Depots {
	d := &Depots{set: map[string]bool{}}
	d.Add(codes...)
	return d
}

// DefaultDepots are the depots known when Config.Depots is nil.
var DefaultDepots = []string{"FH01", "FH02", "FH03", "FH04", "FH05", "FH06", "FH07", "FH08", "FH09"}

// Add onboards depots.
func (d *Depots) Add(codes ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range codes {
		d.set[c] = true
	}
}

// Has reports whether code is known.
func (d *Depots) Has(code string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.set[code]
}

// JobMachine builds the job saga.
func JobMachine() *saga.Machine[Job] {
	m := saga.New[Job](JobSaga)
	for _, s := range []saga.State{Queued, Processing, PartiallySucceeded, Failed} {
		m.State(string(s))
	}
	m.Final(string(Rejected))
	m.Final(string(Succeeded))

	requested := saga.NewEvent[ImportRequested](m, func(e ImportRequested) string { return e.Job })
	done := saga.NewEvent[ChunkDone](m, func(e ChunkDone) string { return e.Job })
	requeue := saga.NewEvent[RequeueRequested](m, func(e RequeueRequested) string { return e.Job })

	m.Initially(saga.When(requested).
		Then(func(c *saga.Context[Job], e ImportRequested) error {
			*c.Data = Job{ID: e.Job, Supplier: e.Supplier, Format: e.Format, FileName: e.FileName,
				Size: len(e.Content), ChunkSize: e.ChunkSize, RequestID: e.RequestID}
			lines, err := Parse(e.Format, e.Content)
			if err != nil {
				var ve *ValidationError
				if !errors.As(err, &ve) {
					return idem.Permanent(err)
				}
				c.Data.Problems = ve.Problems
				return nil
			}
			size := max(e.ChunkSize, 1)
			c.Data.Lines = len(lines)
			for i := 0; i*size < len(lines); i++ {
				part := lines[i*size : min((i+1)*size, len(lines))]
				c.Data.Chunks = append(c.Data.Chunks, ChunkState{Index: i, FirstRow: part[0].Row, Lines: len(part), Status: StatusPending, Attempt: 1})
				c.Send(ChunkRequested{Job: e.Job, Chunk: i, Attempt: 1, Lines: part})
			}
			return nil
		}).
		IfElse(func(c *saga.Context[Job], _ ImportRequested) bool { return len(c.Data.Problems) > 0 },
			func(b *saga.Activity[Job, ImportRequested]) *saga.Activity[Job, ImportRequested] {
				return b.TransitionTo(Rejected)
			},
			func(b *saga.Activity[Job, ImportRequested]) *saga.Activity[Job, ImportRequested] {
				return b.TransitionTo(Queued)
			}))

	// recordDone applies a chunk's report and moves the job on.
	recordDone := func() *saga.Activity[Job, ChunkDone] {
		return saga.When(done).
			Then(func(c *saga.Context[Job], e ChunkDone) error {
				if e.Chunk < 0 || e.Chunk >= len(c.Data.Chunks) {
					return idem.Permanent(fmt.Errorf("job %s has no chunk %d", e.Job, e.Chunk))
				}
				ch := &c.Data.Chunks[e.Chunk]
				if ch.Attempt != e.Attempt || ch.Status != StatusPending {
					return nil // a report of an earlier attempt: nothing to do
				}
				ch.Reports++
				ch.Status, ch.Problems = StatusImported, nil
				if !e.OK {
					ch.Status, ch.Problems = StatusFailed, e.Problems
				}
				c.Data.Outcomes = append(c.Data.Outcomes, Outcome{MessageID: c.MessageID(), Kind: "chunk", Chunk: &e.Chunk,
					Attempt: e.Attempt, Status: ch.Status, Lines: e.Lines, Problems: len(e.Problems)})
				return nil
			}).
			IfElse(func(c *saga.Context[Job], _ ChunkDone) bool { return c.Data.Count(StatusPending) > 0 },
				func(b *saga.Activity[Job, ChunkDone]) *saga.Activity[Job, ChunkDone] {
					return b.TransitionTo(Processing)
				},
				func(b *saga.Activity[Job, ChunkDone]) *saga.Activity[Job, ChunkDone] {
					return b.IfElse(func(c *saga.Context[Job], _ ChunkDone) bool { return c.Data.Count(StatusFailed) == 0 },
						func(b *saga.Activity[Job, ChunkDone]) *saga.Activity[Job, ChunkDone] {
							return b.TransitionTo(Succeeded)
						},
						func(b *saga.Activity[Job, ChunkDone]) *saga.Activity[Job, ChunkDone] {
							return b.IfElse(func(c *saga.Context[Job], _ ChunkDone) bool { return c.Data.Count(StatusImported) == 0 },
								func(b *saga.Activity[Job, ChunkDone]) *saga.Activity[Job, ChunkDone] { return b.TransitionTo(Failed) },
								func(b *saga.Activity[Job, ChunkDone]) *saga.Activity[Job, ChunkDone] {
									return b.TransitionTo(PartiallySucceeded)
								})
						})
				})
	}
	requeueFailed := saga.When(requeue).
		Then(func(c *saga.Context[Job], e RequeueRequested) error {
			if e.Generation != c.Data.Generation+1 {
				return idem.Permanent(fmt.Errorf("requeue generation %d of job %s: want %d", e.Generation, e.Job, c.Data.Generation+1))
			}
			c.Data.Generation = e.Generation
			var requeued []int
			for i := range c.Data.Chunks {
				ch := &c.Data.Chunks[i]
				if ch.Status != StatusFailed {
					continue
				}
				ch.Status, ch.Attempt, ch.Problems = StatusPending, ch.Attempt+1, nil
				requeued = append(requeued, ch.Index)
				c.Send(RetryChunk{Job: e.Job, Chunk: ch.Index, Attempt: ch.Attempt})
			}
			c.Data.Outcomes = append(c.Data.Outcomes, Outcome{MessageID: c.MessageID(), Kind: "requeue", Requeued: requeued})
			return nil
		}).
		TransitionTo(Processing)

	// A job with pending chunks has nothing to re-run yet. Requeue refuses
	// it before publishing (ErrNotRequeueable); a requeue that arrives
	// another way (a replayed dead letter) is refused here, saying why.
	refuseRequeue := saga.When(requeue).
		Then(func(c *saga.Context[Job], e RequeueRequested) error {
			return idem.Permanent(fmt.Errorf("requeue of job %s: %w: chunks are still pending; only PartiallySucceeded and Failed jobs re-run their failed chunks", e.Job, ErrNotRequeueable))
		})

	m.During(Queued, recordDone(), refuseRequeue, saga.Ignore(requested))
	m.During(Processing, recordDone(), refuseRequeue, saga.Ignore(requested))
	m.During(PartiallySucceeded, requeueFailed, saga.Ignore(requested), saga.Ignore(done))
	m.During(Failed, requeueFailed, saga.Ignore(requested), saga.Ignore(done))
	return m
}

// Count returns how many chunks have status.
func (j *Job) Count(status string) int {
	n := 0
	for _, c := range j.Chunks {
		if c.Status == status {
			n++
		}
	}
	return n
}

// FailedChunks lists the indexes of failed chunks.
func (j *Job) FailedChunks() []int {
	var out []int
	for _, c := range j.Chunks {
		if c.Status == StatusFailed {
			out = append(out, c.Index)
		}
	}
	sort.Ints(out)
	return out
}

// ChunkRules decides a chunk's fate: nil imports it; problems fail it
// (permanently, until a requeue); an error is returned to the engine
// (idem.RetryAfter for a transient failure).
type ChunkRules func(job string, chunk, attempt int, lines []Line) ([]Problem, error)

// DepotRules fails the lines whose depot is not in d, and, when fault is
// set, first returns what fault returns (for fault injection).
func DepotRules(d *Depots, fault func(job string, chunk, attempt int) error) ChunkRules {
	return func(job string, chunk, attempt int, lines []Line) ([]Problem, error) {
		if fault != nil {
			if err := fault(job, chunk, attempt); err != nil {
				return nil, err
			}
		}
		var ps []Problem
		for _, l := range lines {
			if !d.Has(l.Depot) && len(ps) < MaxProblems {
				ps = append(ps, Problem{Line: l.Row, Field: "depot", Message: "depot " + strconv.Quote(l.Depot) + " is not onboarded"})
			}
		}
		return ps, nil
	}
}

// ChunkMachine builds the chunk saga with rules.
func ChunkMachine(rules ChunkRules) *saga.Machine[Chunk] {
	m := saga.New[Chunk](ChunkSaga)
	failed := m.State(string(ChunkFailed))
	imported := m.Final(string(ChunkImported))
	requested := saga.NewEvent[ChunkRequested](m, func(e ChunkRequested) string { return ChunkKey(e.Job, e.Chunk) })
	retry := saga.NewEvent[RetryChunk](m, func(e RetryChunk) string { return ChunkKey(e.Job, e.Chunk) })

	run := func(c *saga.Context[Chunk], attempt int) error {
		ps, err := rules(c.Data.Job, c.Data.Index, attempt, c.Data.Lines)
		if err != nil {
			return err
		}
		c.Data.Attempt, c.Data.Problems = attempt, ps
		c.Publish(ChunkDone{Job: c.Data.Job, Chunk: c.Data.Index, Attempt: attempt, OK: len(ps) == 0, Lines: len(c.Data.Lines), Problems: ps})
		return nil
	}
	ok := func(c *saga.Context[Chunk]) bool { return len(c.Data.Problems) == 0 }

	m.Initially(saga.When(requested).
		Then(func(c *saga.Context[Chunk], e ChunkRequested) error {
			*c.Data = Chunk{Job: e.Job, Index: e.Chunk, Lines: e.Lines}
			return run(c, e.Attempt)
		}).
		IfElse(func(c *saga.Context[Chunk], _ ChunkRequested) bool { return ok(c) },
			func(b *saga.Activity[Chunk, ChunkRequested]) *saga.Activity[Chunk, ChunkRequested] {
				return b.TransitionTo(imported)
			},
			func(b *saga.Activity[Chunk, ChunkRequested]) *saga.Activity[Chunk, ChunkRequested] {
				return b.TransitionTo(failed)
			}))
	m.During(failed,
		saga.When(retry).
			Then(func(c *saga.Context[Chunk], e RetryChunk) error {
				if e.Attempt <= c.Data.Attempt {
					return nil // an earlier retry, already run
				}
				return run(c, e.Attempt)
			}).
			IfElse(func(c *saga.Context[Chunk], _ RetryChunk) bool { return ok(c) },
				func(b *saga.Activity[Chunk, RetryChunk]) *saga.Activity[Chunk, RetryChunk] {
					return b.TransitionTo(imported)
				},
				func(b *saga.Activity[Chunk, RetryChunk]) *saga.Activity[Chunk, RetryChunk] {
					return b.TransitionTo(failed)
				}),
		saga.Ignore(requested))
	return m
}

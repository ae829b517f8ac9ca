package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

// JobView is a job as the API shows it.
type JobView struct {
	ID         string    `json:"id"`
	Status     string    `json:"status"`
	Supplier   string    `json:"supplier"`
	Format     string    `json:"format"`
	FileName   string    `json:"file_name,omitempty"`
	Size       int       `json:"size"`
	ChunkSize  int       `json:"chunk_size"`
	Generation int       `json:"requeues"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Lines counts lines per state; Chunks counts chunks per state.
	Lines  Counts `json:"lines"`
	Chunks Counts `json:"chunks"`
	// FailedChunks lists the indexes of the failed chunks.
	FailedChunks []int `json:"failed_chunks,omitempty"`
	// Problems are why a Rejected job was rejected.
	Problems []Problem `json:"problems,omitempty"`
	// ChunkResults and Audit are filled by Job, not by Jobs.
	ChunkResults []ChunkState `json:"chunk_results,omitempty"`
	Audit        []AuditEntry `json:"audit,omitempty"`
}

// Counts are totals per state.
type Counts struct {
	Total    int `json:"total"`
	Pending  int `json:"pending"`
	Imported int `json:"imported"`
	Failed   int `json:"failed"`
}

// AuditEntry is one journal entry of the job, with the detail the job
// recorded for its message.
type AuditEntry struct {
	At        time.Time `json:"at"`
	Event     string    `json:"event"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	Version   int64     `json:"version"`
	MessageID string    `json:"message_id"`
	Detail    *Outcome  `json:"detail,omitempty"`
}

// Job returns the job with its chunk results and audit trail, or nil when
// there is none.
func (a *App) Job(ctx context.Context, id string) (*JobView, error) {
	snap, err := idem.LoadInstance(ctx, a.st, a.job, id)
	if err != nil || snap == nil {
		return nil, err
	}
	return a.view(ctx, snap, true)
}

func (a *App) view(ctx context.Context, snap *idem.Snapshot[Job], full bool) (*JobView, error) {
	j, in := &snap.Data, snap.Instance
	v := &JobView{ID: j.ID, Status: in.State, Supplier: j.Supplier, Format: j.Format, FileName: j.FileName, Size: j.Size,
		ChunkSize: j.ChunkSize, Generation: j.Generation, CreatedAt: in.CreatedAt, UpdatedAt: in.UpdatedAt, FinishedAt: in.FinishedAt,
		FailedChunks: j.FailedChunks(), Problems: j.Problems}
	v.Lines.Total, v.Chunks.Total = j.Lines, len(j.Chunks)
	for _, c := range j.Chunks {
		switch c.Status {
		case StatusPending:
			v.Lines.Pending += c.Lines
			v.Chunks.Pending++
		case StatusImported:
			v.Lines.Imported += c.Lines
			v.Chunks.Imported++
		case StatusFailed:
			v.Lines.Failed += c.Lines
			v.Chunks.Failed++
		}
	}
	if !full {
		return v, nil
	}
	v.ChunkResults = j.Chunks
	journal, err := a.st.Journal(ctx, store.Key{SagaType: JobSaga, Key: in.Key})
	if err != nil {
		return nil, fmt.Errorf("audit trail of job %s: %w", j.ID, err)
	}
	detail := map[string]*Outcome{}
	for i := range j.Outcomes {
		detail[j.Outcomes[i].MessageID] = &j.Outcomes[i]
	}
	for _, e := range journal {
		v.Audit = append(v.Audit, AuditEntry{At: e.At, Event: e.EventType, From: e.FromState, To: e.ToState,
			Version: e.Version, MessageID: e.MessageID, Detail: detail[e.MessageID]})
	}
	return v, nil
}

// Filter selects jobs for Jobs. Zero fields select everything.
type Filter struct {
	Status   string
	Supplier string
	// After is the last job ID of the previous page; Limit bounds the page
	// (default and maximum 100).
	After string
	Limit int
}

// Jobs lists jobs ordered by ID, without chunk results and audit trail.
func (a *App) Jobs(ctx context.Context, f Filter) ([]*JobView, error) {
	if f.Limit <= 0 || f.Limit > 100 {
		f.Limit = 100
	}
	out := []*JobView{}
	after := f.After
	for len(out) < f.Limit {
		page, err := a.st.ListInstances(ctx, &store.ListParams{SagaType: JobSaga, State: f.Status, After: after, Limit: 100})
		if err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		for _, in := range page {
			after = in.Key
			data, err := a.job.DecodeData(in.Data, in.SchemaVersion)
			if err != nil {
				return nil, fmt.Errorf("list jobs: %w", err)
			}
			if f.Supplier != "" && data.Supplier != f.Supplier {
				continue
			}
			v, _ := a.view(ctx, &idem.Snapshot[Job]{Instance: in, Data: data}, false)
			out = append(out, v)
			if len(out) == f.Limit {
				break
			}
		}
		if len(page) < 100 {
			break
		}
	}
	return out, nil
}

// IsTerminal reports whether a job in status s waits for nothing: it
// finished, or only an operator's requeue can move it.
func IsTerminal(s string) bool {
	switch saga.State(s) {
	case Succeeded, PartiallySucceeded, Failed, Rejected:
		return true
	}
	return false
}

package admin

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// Rates are per-second rates of the engine's counters over the last Window
// seconds, at most 10 (all 0 until two samples within 10 s exist: on the
// first request after nobody asked for 10 s).
type Rates struct {
	Applied      float64 `json:"applied"`
	Duplicates   float64 `json:"duplicates"`
	Conflicts    float64 `json:"conflicts"`
	Retries      float64 `json:"retries"`
	DeadLettered float64 `json:"dead_lettered"`
	Window       float64 `json:"window_seconds"`
}

type sample struct {
	at time.Time
	s  idem.Stats
}

// rateSampler turns Engine.Stats snapshots, taken when someone asks, into
// rates over the last rateWindow. It runs no goroutine.
type rateSampler struct {
	stats   func() idem.Stats
	mu      sync.Mutex
	samples []sample
}

const rateWindow = 10 * time.Second

func newRateSampler(e *idem.Engine) *rateSampler { return &rateSampler{stats: e.Stats} }

// rates records a sample at now and returns the rates since the oldest
// sample at most rateWindow old. Samples older than that are dropped, even
// the newest of them: after an idle spell (nobody asked for longer than
// the window) the first answer has a window of 0, and the next ones
// measure from it, rather than averaging over the spell.
func (r *rateSampler) rates(now time.Time) (Rates, idem.Stats) {
	cur := r.stats()
	r.mu.Lock()
	defer r.mu.Unlock()
	i := 0
	for i < len(r.samples) && now.Sub(r.samples[i].at) > rateWindow {
		i++
	}
	r.samples = append(r.samples[i:], sample{at: now, s: cur})
	if len(r.samples) > 64 {
		r.samples = slices.Delete(r.samples, 1, 2)
	}
	base := r.samples[0]
	dt := now.Sub(base.at).Seconds()
	if dt < 0.5 {
		return Rates{}, cur
	}
	per := func(a, b int64) float64 { return float64(a-b) / dt }
	return Rates{
		Applied: per(cur.Applied, base.s.Applied), Duplicates: per(cur.Duplicates, base.s.Duplicates),
		Conflicts: per(cur.Conflicts, base.s.Conflicts), Retries: per(cur.Retries, base.s.Retries),
		DeadLettered: per(cur.DeadLettered, base.s.DeadLettered), Window: dt,
	}, cur
}

// Overview is the answer of GET /api/overview and the console's first page.
type Overview struct {
	// LiveReplicas counts the engine replicas alive by their heartbeats;
	// absent when the store keeps none. Zero means no engine consumes
	// messages, fires timers or relays the outbox: the overview warns.
	LiveReplicas *int       `json:"live_replicas,omitempty"`
	Rates        Rates      `json:"rates"`
	Totals       idem.Stats `json:"totals"`
	// OutboxBacklog counts unsent outbox messages; OutboxOldestSeconds is
	// the age of the oldest.
	OutboxBacklog       int     `json:"outbox_backlog"`
	OutboxOldestSeconds float64 `json:"outbox_oldest_seconds"`
	// TimerLagSeconds is how long the most overdue timer is past due (0
	// when none is).
	TimerLagSeconds float64 `json:"timer_lag_seconds"`
	// QueueReady and QueueUnacked are the transport's depth, absent when it
	// cannot count.
	QueueReady   *int         `json:"queue_ready,omitempty"`
	QueueUnacked *int         `json:"queue_unacked,omitempty"`
	Sagas        []SagaCounts `json:"sagas"`
	// CountsExact is false when the store could only be sampled.
	CountsExact bool `json:"counts_exact"`
	// Stored counts the dead letters and timers the store holds.
	Stored StoredCounts `json:"stored"`
}

// SagaCounts are the instance counts of one saga type.
type SagaCounts struct {
	Type     string                 `json:"type"`
	Active   int                    `json:"active"`
	Finished int                    `json:"finished"`
	States   []readmodel.StateCount `json:"states"`
}

func (p *parts) overview(ctx context.Context) (*Overview, error) {
	now := time.Now()
	o := &Overview{}
	o.Rates, o.Totals = p.rates.rates(now)
	n, oldest, err := p.st.OutboxBacklog(ctx)
	if err != nil {
		return nil, err
	}
	o.OutboxBacklog = n
	if !oldest.IsZero() {
		o.OutboxOldestSeconds = max(0, now.Sub(oldest).Seconds())
	}
	ts, err := p.st.ListTimers(ctx, &store.ListParams{Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(ts) == 1 && ts[0].DueAt.Before(now) {
		o.TimerLagSeconds = now.Sub(ts[0].DueAt).Seconds()
	}
	if p.caps.pending != nil {
		if ready, unacked, err := p.caps.pending.Pending(ctx); err == nil {
			o.QueueReady, o.QueueUnacked = &ready, &unacked
		} else {
			p.log.WarnContext(ctx, "admin: queue depth", "error", err)
		}
	}
	o.Stored = p.storedCounts(ctx)
	o.LiveReplicas = p.liveReplicas(ctx, now)
	o.Sagas, o.CountsExact, err = p.sagaCounts(ctx)
	return o, err
}

// sagaCounts groups the store's counts by saga type, with a row for every
// registered type even when it has no instance.
func (p *parts) sagaCounts(ctx context.Context) ([]SagaCounts, bool, error) {
	counts, exact, err := inspect.Counts(ctx, p.st)
	if err != nil {
		return nil, false, err
	}
	by := map[string]*SagaCounts{}
	for name := range p.e.Sagas() {
		by[name] = &SagaCounts{Type: name}
	}
	for _, c := range counts {
		sc := by[c.SagaType]
		if sc == nil {
			sc = &SagaCounts{Type: c.SagaType}
			by[c.SagaType] = sc
		}
		sc.States = append(sc.States, c)
		if c.Status == store.StatusFinished {
			sc.Finished += c.Count
		} else {
			sc.Active += c.Count
		}
	}
	out := make([]SagaCounts, 0, len(by))
	for _, sc := range by {
		if sc.States == nil {
			sc.States = []readmodel.StateCount{}
		}
		out = append(out, *sc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, exact, nil
}

// SagaType describes one registered machine: GET /api/saga-types.
type SagaType struct {
	Name     string           `json:"name"`
	States   []SagaTypeState  `json:"states"`
	Edges    []saga.GraphEdge `json:"transitions"`
	Problems []string         `json:"problems"`
	Mermaid  string           `json:"mermaid"`
	Active   int              `json:"active"`
	Finished int              `json:"finished"`
}

// SagaTypeState is one state of a SagaType with its live instance count.
type SagaTypeState struct {
	Name  string `json:"name"`
	Final bool   `json:"final"`
	Count int    `json:"count"`
}

func (p *parts) sagaTypes(ctx context.Context) ([]SagaType, error) {
	counts, _, err := p.sagaCounts(ctx)
	if err != nil {
		return nil, err
	}
	byType := map[string]SagaCounts{}
	for _, c := range counts {
		byType[c.Type] = c
	}
	machines := p.e.Sagas()
	names := make([]string, 0, len(machines))
	for n := range machines {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]SagaType, 0, len(names))
	for _, n := range names {
		out = append(out, describe(machines[n], byType[n]))
	}
	return out, nil
}

func describe(m idem.Machine, c SagaCounts) SagaType {
	st := SagaType{Name: m.Name(), Mermaid: m.Mermaid(), Active: c.Active, Finished: c.Finished, Problems: []string{}, Edges: []saga.GraphEdge{}}
	inState := map[string]int{}
	for _, sc := range c.States {
		inState[sc.State] += sc.Count
	}
	gr := m.Describe().Graph()
	st.Edges = append(st.Edges, gr.Edges...)
	for _, gs := range gr.States {
		st.States = append(st.States, SagaTypeState{Name: string(gs.Name), Final: gs.Final, Count: inState[string(gs.Name)]})
	}
	if err := m.Validate(); err != nil {
		var j interface{ Unwrap() []error }
		if errors.As(err, &j) {
			for _, e := range j.Unwrap() {
				st.Problems = append(st.Problems, e.Error())
			}
		} else {
			st.Problems = append(st.Problems, err.Error())
		}
	}
	return st
}

func (p *parts) overviewSeries(w http.ResponseWriter, _ *http.Request) {
	p.charts.touch(time.Now())
	writeJSON(w, http.StatusOK, p.charts.series())
}

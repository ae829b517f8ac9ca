package admin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/store"
)

// Replica is an engine replica as GET /api/replicas shows it: its last
// heartbeat (see store.Replica) and its state at the time of the request.
type Replica struct {
	ID        string            `json:"id"`
	Host      string            `json:"host"`
	Version   string            `json:"version"`
	StartedAt time.Time         `json:"started_at"`
	Config    map[string]string `json:"config,omitempty"`
	Lanes     int               `json:"lanes"`
	Consumers int               `json:"consumers"`
	// LastBatchAt is when the replica last committed a unit of work;
	// absent when it has not.
	LastBatchAt time.Time `json:"last_batch_at,omitzero"`
	// LagSeconds is the age of the oldest message of its last committed
	// unit of work.
	LagSeconds float64 `json:"lag_seconds"`
	// IntervalSeconds is the replica's heartbeat interval.
	IntervalSeconds float64   `json:"interval_seconds"`
	BeatAt          time.Time `json:"beat_at"`
	StoppedAt       time.Time `json:"stopped_at,omitzero"`
	// State is "alive", "stopped" (cleanly) or "gone" (no beat for
	// store.ReplicaGoneBeats intervals).
	State string `json:"state"`
	// Self is set on the replica of the engine that serves this API.
	Self bool `json:"self"`
}

// ReplicaList is GET /api/replicas: the replicas, the most recently
// started first, and how many are in each state.
type ReplicaList struct {
	Replicas []Replica     `json:"replicas"`
	Counts   ReplicaCounts `json:"counts"`
}

// ReplicaCounts counts replicas by state.
type ReplicaCounts struct {
	Alive   int `json:"alive"`
	Stopped int `json:"stopped"`
	Gone    int `json:"gone"`
}

// errNoReplicas is the error of a store that is no store.ReplicaRegistry.
var errNoReplicas = errors.New("the store keeps no replica heartbeats")

// replicasView is the replicas page.
type replicasView struct {
	Rows    []replicaRow
	Counts  ReplicaCounts
	Problem string
	Now     time.Time
}

// replicaRow is a replica as the page shows it.
type replicaRow struct {
	Replica
	// Lag is LagSeconds to the millisecond below a second.
	Lag string
	// Config is the configuration summary as sorted key=value pairs.
	Config []string
}

// routeConsoleReplicas adds the replicas page and GET /api/replicas.
func (s *Server) routeConsoleReplicas() {
	s.mux.Handle("GET /replicas", s.consolePage(s.pageReplicas))
	s.mux.Handle("GET /api/replicas", s.authorize(http.HandlerFunc(s.apiReplicas)))
}

func (s *Server) apiReplicas(w http.ResponseWriter, r *http.Request) {
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	out, err := s.listReplicas(ctx, limit, time.Now())
	if errors.Is(err, errNoReplicas) {
		writeError(w, http.StatusNotImplemented, "store %T keeps no replica heartbeats", s.st)
		return
	}
	if err != nil {
		s.internalError(w, r, "list replicas", err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) pageReplicas(w http.ResponseWriter, r *http.Request) {
	v := &replicasView{Now: time.Now()}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	list, err := s.listReplicas(ctx, defaultLimit, v.Now)
	switch {
	case errors.Is(err, errNoReplicas):
		v.Problem = "This store keeps no replica heartbeats."
	case err != nil:
		s.storeFailed(w, r, "list replicas", err)
		return
	default:
		v.Counts = list.Counts
		for _, x := range list.Replicas {
			v.Rows = append(v.Rows, replicaRow{Replica: x, Lag: lagText(x.LagSeconds), Config: configPairs(x.Config)})
		}
	}
	s.render(w, r, http.StatusOK, "replicas", "Replicas", v)
}

// listReplicas reads at most limit replicas and judges their state at now.
func (s *Server) listReplicas(ctx context.Context, limit int, now time.Time) (*ReplicaList, error) {
	rr, ok := s.st.(store.ReplicaRegistry)
	if !ok {
		return nil, errNoReplicas
	}
	rs, err := rr.Replicas(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	out := &ReplicaList{Replicas: make([]Replica, 0, len(rs))}
	self := s.e.ReplicaID()
	for i := range rs {
		x := toReplica(&rs[i], now)
		x.Self = x.ID == self
		out.Counts.add(x.State)
		out.Replicas = append(out.Replicas, x)
	}
	return out, nil
}

func (c *ReplicaCounts) add(state string) {
	switch state {
	case store.ReplicaAlive:
		c.Alive++
	case store.ReplicaStopped:
		c.Stopped++
	case store.ReplicaGone:
		c.Gone++
	}
}

func toReplica(r *store.Replica, now time.Time) Replica {
	return Replica{
		ID: r.ID, Host: r.Host, Version: r.Version, StartedAt: r.StartedAt, Config: r.Config,
		Lanes: r.Lanes, Consumers: r.Consumers, LastBatchAt: r.LastBatchAt, LagSeconds: r.Lag.Seconds(),
		IntervalSeconds: r.Interval.Seconds(), BeatAt: r.BeatAt, StoppedAt: r.StoppedAt, State: r.State(now),
	}
}

// configPairs returns a configuration summary as "key=value" strings,
// sorted by key.
func configPairs(c map[string]string) []string {
	out := make([]string, 0, len(c))
	for _, k := range slices.Sorted(maps.Keys(c)) {
		out = append(out, k+"="+c[k])
	}
	return out
}

// lagText formats a lag: milliseconds below a second, then as span does.
func lagText(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return span(d)
}

// collectReplicas exports idem_replicas: the replicas by state, when the
// store keeps heartbeats. Every state has a sample, zero included.
func (c *collector) collectReplicas(ctx context.Context, now time.Time, gauge func(*prometheus.Desc, float64, ...string)) {
	rr, ok := c.st.(store.ReplicaRegistry)
	if !ok {
		return
	}
	rs, err := rr.Replicas(ctx, maxLimit)
	if err != nil {
		c.log.Warn("metrics: list the replicas", "error", err)
		return
	}
	var n ReplicaCounts
	for i := range rs {
		n.add(rs[i].State(now))
	}
	gauge(c.replicas, float64(n.Alive), store.ReplicaAlive)
	gauge(c.replicas, float64(n.Stopped), store.ReplicaStopped)
	gauge(c.replicas, float64(n.Gone), store.ReplicaGone)
}

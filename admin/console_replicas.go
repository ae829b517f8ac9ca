package admin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
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
	// State is "alive", "stopped" (cleanly), "gone" (no beat for
	// store.ReplicaGoneBeats intervals) or "replaced" (gone, and a replica
	// that started after its last beat is alive).
	State string `json:"state"`
	// Self is set on the replica of the engine that serves this API.
	Self bool `json:"self"`
}

// ReplicaList is GET /api/replicas: the replicas, the most recently
// started first (up to the limit), and how many records are in each state,
// every record counted where the store is a readmodel.ReplicaCounter.
type ReplicaList struct {
	Replicas []Replica     `json:"replicas"`
	Counts   ReplicaCounts `json:"counts"`
}

// ReplicaCounts counts replicas by state.
type ReplicaCounts struct {
	Alive    int `json:"alive"`
	Stopped  int `json:"stopped"`
	Gone     int `json:"gone"`
	Replaced int `json:"replaced"`
}

// ReplicaReplaced is the state of a gone replica that a replica started
// after its last beat has replaced: it needs no one's attention, and
// idem_replicas{state="gone"} (IdemReplicaGone) no longer counts it.
const ReplicaReplaced = readmodel.ReplicaReplaced

// replicaStates judges each replica's state at now: store.Replica.State,
// with a gone one that a live replica started after its last beat marked
// ReplicaReplaced.
func replicaStates(rs []store.Replica, now time.Time) []string {
	out := make([]string, len(rs))
	var liveStarts []time.Time
	for i := range rs {
		if out[i] = rs[i].State(now); out[i] == store.ReplicaAlive {
			liveStarts = append(liveStarts, rs[i].StartedAt)
		}
	}
	for i := range rs {
		if out[i] == store.ReplicaGone && slices.ContainsFunc(liveStarts, func(t time.Time) bool { return t.After(rs[i].BeatAt) }) {
			out[i] = ReplicaReplaced
		}
	}
	return out
}

// errNoReplicas is the error of a store that is no store.ReplicaRegistry.
var errNoReplicas = errors.New("the store keeps no replica heartbeats")

// replicasView is the replicas page.
type replicasView struct {
	Rows    []replicaRow
	Counts  ReplicaCounts
	Problem string
	Now     time.Time
	// Confirm asks before removing the records of replicas no longer
	// running; Flash says what a removal did.
	Confirm bool
	Flash   string
}

// replicaRow is a replica as the page shows it.
type replicaRow struct {
	Replica
	// Lag is LagSeconds to the millisecond below a second.
	Lag string
	// Config is the configuration summary as sorted key=value pairs.
	Config []string
}

func (c *console) pageReplicas(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := &replicasView{Now: time.Now(), Confirm: q.Get("confirm") == "remove"}
	if n := q.Get("removed"); n != "" {
		v.Flash = fmt.Sprintf("%d replica record(s) removed.", atoi(n))
		if left := atoi(q.Get("left")); left > 0 {
			v.Flash += fmt.Sprintf(" %d kept: those replicas beat again while they were being removed.", left)
		}
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	list, err := c.listReplicas(ctx, defaultLimit, v.Now)
	switch {
	case errors.Is(err, errNoReplicas):
		v.Problem = "This store keeps no replica heartbeats."
	case err != nil:
		c.storeFailed(w, r, "list replicas", err)
		return
	default:
		v.Counts = list.Counts
		for _, x := range list.Replicas {
			v.Rows = append(v.Rows, replicaRow{Replica: x, Lag: lagText(x.LagSeconds), Config: configPairs(x.Config)})
		}
	}
	c.render(w, r, http.StatusOK, "replicas", "Replicas", v)
}

func (c *ReplicaCounts) add(state string) {
	switch state {
	case store.ReplicaAlive:
		c.Alive++
	case store.ReplicaStopped:
		c.Stopped++
	case store.ReplicaGone:
		c.Gone++
	case ReplicaReplaced:
		c.Replaced++
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
	if c.caps.replicas == nil {
		return
	}
	n, err := c.caps.countReplicas(ctx, now)
	if err != nil {
		c.log.Warn("metrics: count the replicas", "error", err)
		return
	}
	gauge(c.replicas, float64(n.Alive), store.ReplicaAlive)
	gauge(c.replicas, float64(n.Stopped), store.ReplicaStopped)
	gauge(c.replicas, float64(n.Gone), store.ReplicaGone)
	gauge(c.replicas, float64(n.Replaced), ReplicaReplaced)
}

// RemovedReplicas is the answer of POST /api/replicas/remove.
type RemovedReplicas struct {
	// Removed is how many records were removed.
	Removed int `json:"removed"`
	// Left is how many records judged no longer running were kept
	// because the replica beat again before they could be removed.
	Left int `json:"left"`
}

func (c *console) actRemoveReplicas(w http.ResponseWriter, r *http.Request) {
	if r.PostFormValue("confirm") != "yes" {
		http.Redirect(w, r, basePath(r)+"/replicas?confirm=remove", http.StatusSeeOther)
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	out, err := c.removeReplicas(ctx, time.Now())
	switch {
	case errors.Is(err, errNoReplicas):
		c.consoleError(w, r, http.StatusNotImplemented, "This store keeps no replica heartbeats.")
	case err != nil:
		c.storeFailed(w, r, "remove replicas", err)
	default:
		http.Redirect(w, r, basePath(r)+"/replicas"+query("removed", strconv.Itoa(out.Removed), "left", strconv.Itoa(out.Left)), http.StatusSeeOther)
	}
}

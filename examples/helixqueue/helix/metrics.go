package helix

import (
	"context"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the example's Prometheus metrics, named as in the incident's
// observability table. The counters of what happened to batches are read
// from the tables (they are the same in every process); the assignment
// conflicts and the stream's pending entries are this process's.
type Metrics struct {
	// Registry holds the metrics; serve it at /metrics.
	Registry *prometheus.Registry
	// AssignConflicts counts assignment requests that lost to another
	// assigner (helix_assign_conflict_total).
	AssignConflicts prometheus.Counter
}

// NewMetrics registers the metrics of app on a new registry.
func NewMetrics(app *App) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		AssignConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "helix_assign_conflict_total",
			Help: "Assignment requests refused because the batch already had an active assignment.",
		}),
	}
	count := func(q string) func() float64 {
		return func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			n, err := app.DB.Count(ctx, q)
			if err != nil {
				return math.NaN()
			}
			return float64(n)
		}
	}
	m.Registry.MustRegister(m.AssignConflicts,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "helix_duplicate_active_assignments",
			Help: "Batches with more than one active assignment (must be 0).",
		}, count(duplicateActiveSQL)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "helix_audit_missing_total",
			Help: "Assignments without the audit row of their ASSIGNED transition (must be 0).",
		}, count(auditMissingSQL)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "helix_lease_reaped_total",
			Help: "Assignments the lease reaper released back to PENDING.",
		}, count(leaseReapedSQL)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "helix_id_normalization_changed_total",
			Help: "Batches first submitted with a sample ID that differs from its canonical (NFC) form.",
		}, count(normalizedSQL)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "helix_stream_pending",
			Help: "Redis stream entries handed out to consumers and not yet acknowledged.",
		}, func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			n, err := app.Pending(ctx)
			if err != nil {
				return math.NaN()
			}
			return float64(n)
		}),
	)
	return m
}

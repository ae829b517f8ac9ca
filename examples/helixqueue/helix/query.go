package helix

import (
	"context"
	"fmt"
)

// AuditRow is one row of helix_audit.
type AuditRow struct {
	ID        int64  `json:"id"`
	SampleKey string `json:"sample_key"`
	RawSample string `json:"raw_sample"`
	MessageID string `json:"message_id"`
	From      string `json:"from"`
	To        string `json:"to"`
	Worker    string `json:"worker"`
	Attempt   int    `json:"attempt"`
	Reason    string `json:"reason"`
}

// Audit returns the audit rows of one batch (by canonical key), or of all
// batches when key is empty, in order.
func (db *DB) Audit(ctx context.Context, key string) ([]AuditRow, error) {
	rows, err := db.QueryContext(ctx, db.q(`SELECT id, sample_key, raw_sample, message_id, from_state, to_state, worker, attempt, reason
		FROM helix_audit WHERE $1 = '' OR sample_key = $1 ORDER BY id`), key)
	if err != nil {
		return nil, fmt.Errorf("helixqueue: read audit: %w", err)
	}
	defer rows.Close()
	var out []AuditRow
	for rows.Next() {
		var r AuditRow
		if err := rows.Scan(&r.ID, &r.SampleKey, &r.RawSample, &r.MessageID, &r.From, &r.To, &r.Worker, &r.Attempt, &r.Reason); err != nil {
			return nil, fmt.Errorf("helixqueue: read audit: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// PendingBatches returns up to limit batches whose last audited state is
// PENDING, oldest first. The audit row commits with the state, so this
// read model never shows a state the saga does not have (it may lag).
func (db *DB) PendingBatches(ctx context.Context, limit int) ([]string, error) {
	rows, err := db.QueryContext(ctx, db.q(`SELECT a.sample_key FROM helix_audit a
		WHERE a.to_state = 'PENDING' AND NOT EXISTS (
			SELECT 1 FROM helix_audit b WHERE b.sample_key = a.sample_key AND b.id > a.id)
		ORDER BY a.id LIMIT $1`), limit)
	if err != nil {
		return nil, fmt.Errorf("helixqueue: read pending batches: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("helixqueue: read pending batches: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// Result is one completed batch.
type Result struct {
	SampleKey string `json:"sample_key"`
	Worker    string `json:"worker"`
	Attempt   int    `json:"attempt"`
	Result    string `json:"result"`
}

// Results returns the completed batches.
func (db *DB) Results(ctx context.Context) ([]Result, error) {
	rows, err := db.QueryContext(ctx, `SELECT sample_key, worker, attempt, result FROM helix_results ORDER BY sample_key`)
	if err != nil {
		return nil, fmt.Errorf("helixqueue: read results: %w", err)
	}
	defer rows.Close()
	var out []Result
	for rows.Next() {
		var r Result
		if err := rows.Scan(&r.SampleKey, &r.Worker, &r.Attempt, &r.Result); err != nil {
			return nil, fmt.Errorf("helixqueue: read results: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Count runs a reconciliation query that returns one number.
func (db *DB) Count(ctx context.Context, query string) (int64, error) {
	var n int64
	if err := db.QueryRowContext(ctx, query).Scan(&n); err != nil {
		return 0, fmt.Errorf("helixqueue: count: %w", err)
	}
	return n, nil
}

// Reconciliation queries, for the metrics of the same names.
const (
	// duplicateActiveSQL counts batches with more than one active
	// assignment: always 0 (the saga and a unique index forbid it).
	duplicateActiveSQL = `SELECT COUNT(*) FROM (SELECT sample_key FROM helix_assignments WHERE outcome IS NULL GROUP BY sample_key HAVING COUNT(*) > 1) d`
	// auditMissingSQL counts assignments without the audit row of their
	// ASSIGNED transition: always 0 (same transaction).
	auditMissingSQL = `SELECT COUNT(*) FROM helix_assignments s WHERE NOT EXISTS (
		SELECT 1 FROM helix_audit a WHERE a.sample_key = s.sample_key AND a.attempt = s.attempt AND a.to_state = 'ASSIGNED')`
	// leaseReapedSQL counts the releases by the reaper.
	leaseReapedSQL = `SELECT COUNT(*) FROM helix_audit WHERE reason = '` + ReasonLeaseExpired + `'`
	// normalizedSQL counts submissions whose raw ID differed from its
	// canonical form.
	normalizedSQL = `SELECT COUNT(*) FROM helix_audit WHERE from_state = '' AND raw_sample <> sample_key`
)

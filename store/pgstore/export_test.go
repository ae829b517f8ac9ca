package pgstore

import "context"

// StatsCounts exposes the statistics path of EstimateInstanceCounts, which
// runs only above ExactCountBelow instances.
var StatsCounts = (*Store).statsCounts

// EndStalled runs one pass of s's watchdog, as its loop does every
// stalledEvery.
func EndStalled(ctx context.Context, s *Store) { s.endStalled(ctx) }

// SessionParams is the session settings Open gives every connection for a
// lease.
var SessionParams = sessionParams

// Migrations exposes the embedded migrations, to build an older schema.
var Migrations = migrations

package admit

import (
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

func TestSweepable(t *testing.T) {
	now := time.Unix(1000, 0)
	rate := &store.Limit{Name: "r", Rate: 1, Burst: 4}
	capOnly := &store.Limit{Name: "c", Concurrency: 2}
	for _, tc := range []struct {
		name string
		c    Idle
		idle time.Duration
		want bool
	}{
		{"full bucket, idle", Idle{Bucket: true, Tokens: 4, RefilledAt: now.Add(-time.Hour), UsedAt: now.Add(-time.Hour), Limit: rate}, time.Minute, true},
		{"refilled to full since", Idle{Bucket: true, Tokens: 0, RefilledAt: now.Add(-4 * time.Second), UsedAt: now.Add(-4 * time.Second), Limit: rate}, time.Second, true},
		{"partial bucket", Idle{Bucket: true, Tokens: 0, RefilledAt: now.Add(-3 * time.Second), UsedAt: now.Add(-3 * time.Second), Limit: rate}, time.Second, false},
		{"full but used within idle", Idle{Bucket: true, Tokens: 4, RefilledAt: now.Add(-time.Second), UsedAt: now.Add(-time.Second), Limit: rate}, time.Minute, false},
		{"no bucket, idle", Idle{UsedAt: now.Add(-time.Hour), Limit: capOnly}, time.Minute, true},
		{"no bucket, used within idle", Idle{UsedAt: now.Add(-time.Second), Limit: capOnly}, time.Minute, false},
		{"no bucket, use unknown", Idle{Limit: capOnly}, time.Hour, true},
		{"partial bucket, no rate in force", Idle{Bucket: true, Tokens: 0, RefilledAt: now.Add(-time.Hour), UsedAt: now.Add(-time.Hour), Limit: capOnly}, time.Minute, true},
		{"partial bucket, no limit known", Idle{Bucket: true, Tokens: 0, RefilledAt: now.Add(-time.Hour), UsedAt: now.Add(-time.Hour)}, time.Minute, true},
	} {
		if got := Sweepable(tc.c, now, tc.idle); got != tc.want {
			t.Errorf("%s: Sweepable got %v, want %v", tc.name, got, tc.want)
		}
	}
}

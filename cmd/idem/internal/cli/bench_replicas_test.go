package cli

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemhq/idem/cmd/idem/internal/bench"
	"github.com/idemhq/idem/internal/testenv"
)

// TestBenchReplicasSmallRun: idem bench --replicas runs each count as that
// many worker processes on one database; every replica applies some of
// the stream, and the replicas' counts add up to the workload's, in both
// phases (exactly-once checked from the database).
func TestBenchReplicasSmallRun(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	code, out, errOut := run(t, "bench", "--store", url, "--schema", "t_"+hex.EncodeToString(b[:]), "--replicas", "1,2",
		"--messages", "2000", "--keys", "200", "--seed", "3", "--latency-load", "0.5", "--latency-duration", "1s", "--latency-warmup", "0s", "--json", "--quiet")
	var rep bench.ReplicaReport
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("exit %d (want 0), JSON error %v\nstdout:\n%s\nstderr:\n%s", code, err, out, errOut)
	}
	if !rep.ExactlyOnce || len(rep.Runs) != 2 {
		t.Fatalf("report: exactly-once %v, %d runs; want true and 2\n%s", rep.ExactlyOnce, len(rep.Runs), out)
	}
	for _, r := range rep.Runs {
		if len(r.PerReplica) != r.Replicas {
			t.Errorf("%d replicas: %d reported, want one report each", r.Replicas, len(r.PerReplica))
		}
		var sum int64
		for i, n := range r.PerReplica {
			if n == 0 {
				t.Errorf("%d replicas: replica %d applied nothing: %v", r.Replicas, i+1, r.PerReplica)
			}
			sum += n
		}
		if sum != r.Applied || r.Applied != int64(rep.Distinct) || r.Duplicates != int64(rep.Duplicates) {
			t.Errorf("%d replicas: applied %v (sum %d, total %d) and skipped %d; want a total of %d applied and %d skipped",
				r.Replicas, r.PerReplica, sum, r.Applied, r.Duplicates, rep.Distinct, rep.Duplicates)
		}
		if r.DeliveriesPerSec <= 0 || r.RoundTrips <= 0 || r.LatencyMessages == 0 || r.P99Ms <= 0 {
			t.Errorf("%d replicas: %.0f deliveries/s, %.3f round trips/delivery, p99 %.1f ms over %d messages; want all measured",
				r.Replicas, r.DeliveriesPerSec, r.RoundTrips, r.P99Ms, r.LatencyMessages)
		}
	}
}

// TestBenchReplicasRefusesMatrixFlags: the flags that choose engine
// configurations do not apply to a replica sweep (every replica runs the
// zero Config), and a bad count is refused, before any database work.
func TestBenchReplicasRefusesMatrixFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--replicas", "1,4", "--batch", "10"}, "--batch does not apply with --replicas"},
		{[]string{"--replicas", "1,4", "--claim", "lease"}, "--claim does not apply with --replicas"},
		{[]string{"--replicas", "0"}, "--replicas"},
		{[]string{"--replicas", "1,x"}, "--replicas"},
		{[]string{"--replicas", "65"}, "between 1 and 64"},
		{[]string{"--replicas", "2", "--transport", "redis://127.0.0.1:1/0"}, "a replica sweep runs on nats-embedded"},
	} {
		args := append([]string{"bench", "--store", "postgres://u@127.0.0.1:1/db"}, tc.args...)
		code, _, errOut := run(t, args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message with %q", tc.args, code, errOut, tc.want)
		}
	}
}

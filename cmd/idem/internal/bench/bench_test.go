package bench

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNewWorkload(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n, keys       int
		dup           float64
		wantDuplicate int
	}{
		{n: 1, keys: 3, dup: 0.2, wantDuplicate: 0},
		{n: 10, keys: 3, dup: 0.2, wantDuplicate: 2},
		{n: 1000, keys: 50, dup: 0.2, wantDuplicate: 200},
		{n: 1000, keys: 50, dup: 0, wantDuplicate: 0},
		{n: 5, keys: 2, dup: 0.99, wantDuplicate: 4},
	} {
		w := NewWorkload(tc.n, tc.keys, tc.dup, 7, "m-")
		if got := len(w.Deliveries); got != tc.n {
			t.Errorf("n=%d dup=%v: got %d deliveries, want %d", tc.n, tc.dup, got, tc.n)
		}
		if got := w.Duplicates(); got != tc.wantDuplicate {
			t.Errorf("n=%d dup=%v: got %d duplicates, want %d", tc.n, tc.dup, got, tc.wantDuplicate)
		}
		seen := map[string]int{} // ID → key
		perKey := make([]int, tc.keys)
		for i, d := range w.Deliveries {
			k, ok := seen[d.ID]
			switch {
			case d.Dup && !ok:
				t.Fatalf("delivery %d (%s) is a duplicate of no earlier message", i, d.ID)
			case d.Dup && k != d.Key:
				t.Fatalf("delivery %d (%s) repeats the ID with key %d, the original had key %d", i, d.ID, d.Key, k)
			case !d.Dup && ok:
				t.Fatalf("delivery %d (%s) reuses an ID but is not marked a duplicate", i, d.ID)
			case !d.Dup:
				seen[d.ID] = d.Key
				perKey[d.Key]++
			}
		}
		if len(seen) != w.Distinct {
			t.Errorf("n=%d: %d distinct IDs, Distinct says %d", tc.n, len(seen), w.Distinct)
		}
		if !slices.Equal(perKey, w.Expected) {
			t.Errorf("n=%d: Expected %v, counted %v", tc.n, w.Expected, perKey)
		}
	}
}

func TestNewWorkloadIsReproducible(t *testing.T) {
	t.Parallel()
	a, b := NewWorkload(500, 20, 0.2, 3, "m-"), NewWorkload(500, 20, 0.2, 3, "m-")
	if !slices.Equal(a.Deliveries, b.Deliveries) {
		t.Fatal("the same seed gave two different streams")
	}
	if c := NewWorkload(500, 20, 0.2, 4, "m-"); slices.Equal(a.Deliveries, c.Deliveries) {
		t.Fatal("two seeds gave the same stream")
	}
}

func TestDivertedTypeIsTheEmittedType(t *testing.T) {
	t.Parallel()
	if !strings.Contains(divertEmittedSQL, "'"+incrementedType+"'") {
		t.Fatalf("divertEmittedSQL does not name the emitted type %s:\n%s", incrementedType, divertEmittedSQL)
	}
}

func TestEnvelopesCarryTheirPosition(t *testing.T) {
	t.Parallel()
	w := NewWorkload(50, 5, 0.2, 1, "m-")
	for i, env := range w.Envelopes(time.Unix(0, 0)) {
		if env.Type != incrementType || env.ID != w.Deliveries[i].ID || env.CorrelationID != keyName(w.Deliveries[i].Key) {
			t.Fatalf("envelope %d: %+v does not match delivery %+v", i, env, w.Deliveries[i])
		}
		if got, want := env.Headers[headerSeq], strconv.Itoa(i); got != want {
			t.Fatalf("envelope %d: header %s = %q, want %q", i, headerSeq, got, want)
		}
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.99, 7 * time.Millisecond},
		{ms(5, 1, 4, 2, 3), 0.5, 3 * time.Millisecond},
		{ms(5, 1, 4, 2, 3), 0.99, 5 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.5, 5 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.9, 9 * time.Millisecond},
	} {
		if got := percentile(slices.Clone(tc.in), tc.p); got != tc.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
		}
	}
}

func validOptions() Options {
	return Options{
		Messages: 10, Keys: 2, Dup: 0.2, Batches: []int{1}, Lanes: []int{1}, BaselineClients: 1, BaselineBatch: 10,
		LatencyLoad: 0.7, LatencyDuration: time.Second, Timeout: time.Minute,
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	t.Parallel()
	if err := (&Options{}).Validate(); err == nil {
		t.Fatal("zero options validated")
	}
	o := validOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	for flag, mutate := range map[string]func(o *Options){
		"--messages":         func(o *Options) { o.Messages = 0 },
		"--keys":             func(o *Options) { o.Keys = -1 },
		"--dup":              func(o *Options) { o.Dup = 1 },
		"--batch":            func(o *Options) { o.Batches = []int{10, 0} },
		"--lanes":            func(o *Options) { o.Lanes = nil },
		"--baseline-clients": func(o *Options) { o.BaselineClients = 0 },
		"--baseline-batch":   func(o *Options) { o.BaselineBatch = 0 },
		"--latency-load":     func(o *Options) { o.LatencyLoad = 1.5 },
		"--latency-duration": func(o *Options) { o.LatencyDuration = 0 },
		"--latency-warmup":   func(o *Options) { o.LatencyWarmup = -time.Second },
		"--timeout":          func(o *Options) { o.Timeout = -time.Second },
	} {
		o := validOptions()
		mutate(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: got %v, want an error naming the flag", flag, err)
		}
	}
}

func TestTargetPicksTheBestRunAtBatch100(t *testing.T) {
	t.Parallel()
	runs := []EngineRun{
		{Batch: 10, Lanes: 1, RatioA: 9, RatioB: 0.9, RoundTripsPerMsg: 0.1}, // other batch size: ignored
		{Batch: 100, Lanes: 1, RatioA: 2, RatioB: 0.3, RoundTripsPerMsg: 0.03},
		{Batch: 100, Lanes: 4, RatioA: 3, RatioB: 0.4, RoundTripsPerMsg: 0.09},
		{Batch: 100, Lanes: 16, RatioA: 1, RatioB: 0.6, RoundTripsPerMsg: 0.3},
	}
	got := target(runs)
	if !got.Evaluated || got.Lanes != 4 || got.Met || got.MetA || got.MetB || !got.MetRoundTrips {
		t.Errorf("target = %+v, want lanes 4 (met round trips only), not met", got)
	}
	runs = append(runs, EngineRun{Batch: 100, Lanes: 2, RatioA: 5.5, RatioB: 0.55, RoundTripsPerMsg: 0.06})
	if got := target(runs); !got.Met || got.Lanes != 2 {
		t.Errorf("target = %+v, want met by lanes 2", got)
	}
	if got := target(runs[:1]); got.Evaluated {
		t.Errorf("target without batch 100 = %+v, want not evaluated", got)
	}
}

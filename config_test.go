package idem_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// TestConfigReportsDefaults: Engine.Config gives the configuration the
// engine runs with, defaults filled in, and keeps what the caller set.
func TestConfigReportsDefaults(t *testing.T) {
	t.Parallel()
	st, mem := memstore.New(nil), memtransport.New(nil)
	t.Cleanup(func() { _ = mem.Close(); _ = st.Close() })
	e, err := idem.NewEngine(st, mem, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Config(); got.BatchSize != 64 || got.Lanes != 2*runtime.GOMAXPROCS(0) || got.Consumers != 4 || got.MaxAttempts != 10 {
		t.Errorf("zero Config runs with BatchSize %d, Lanes %d, Consumers %d, MaxAttempts %d; want 64, %d, 4, 10",
			got.BatchSize, got.Lanes, got.Consumers, got.MaxAttempts, 2*runtime.GOMAXPROCS(0))
	}
	e, err = idem.NewEngine(st, mem, &idem.Config{Consumers: 3, Lanes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Config(); got.Lanes != 2 || got.Consumers != 3 {
		t.Errorf("Config() has Lanes %d, Consumers %d; want the 2 and 3 given", got.Lanes, got.Consumers)
	}
}

// TestConfigNamesFirstBadField: with several negative fields, the error
// names the first in Config's order, every time (a map's order is random).
func TestConfigNamesFirstBadField(t *testing.T) {
	for range 20 {
		_, err := idem.NewEngine(memstore.New(nil), memtransport.New(nil), &idem.Config{StopTimeout: -1, Lanes: -1, SweepBatch: -1})
		if err == nil || !strings.Contains(err.Error(), "Config.Lanes is negative") {
			t.Fatalf("got %v, want the error to name Config.Lanes", err)
		}
	}
}

// A deploy check setting that would do nothing, or is out of range, stops
// NewEngine with a message naming the field and what to set.
func TestConfigRefusesBadDeployCheck(t *testing.T) {
	for _, c := range []struct {
		cfg  idem.Config
		want string
	}{
		{idem.Config{DeployCheck: "strict"}, `Config.DeployCheck is "strict"`},
		{idem.Config{DeployCheckSample: 10}, "Config.DeployCheck is off, so nothing would be sampled"},
		{idem.Config{DeployCheck: idem.DeployCheckWarn, DeployCheckSample: -1}, "Config.DeployCheckSample is -1"},
	} {
		_, err := idem.NewEngine(memstore.New(nil), memtransport.New(nil), &c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error containing %q", c.cfg, err, c.want)
		}
	}
	if _, err := idem.NewEngine(memstore.New(nil), memtransport.New(nil), &idem.Config{DeployCheck: idem.DeployCheckRefuse, DeployCheckSample: 5}); err != nil {
		t.Errorf("a good deploy check setting refused: %v", err)
	}
}

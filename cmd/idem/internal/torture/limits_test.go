package torture

import (
	"testing"
	"time"
)

// The limits checker fails a real run whose engine lets every message
// through without admission: the workers' own log of what they were
// handed shows the caps and the rate exceeded. On the store's own queue
// the admitting receive asks for no counter; beside a broker (the
// embedded nats-server) every Admit does.
func TestLimitsCheckerCatchesNoAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process run of several seconds")
	}
	for _, tr := range []string{"", TransportEmbedded} {
		t.Run("transport="+tr, func(t *testing.T) {
			r := run(t, Options{Store: "sqlite", Transport: tr, Duration: 5 * time.Second, Seed: 5, Limits: true, Break: BreakNoAdmission, Settle: 30 * time.Second})
			if r.Pass() {
				t.Fatal("the checker passed an engine that admits everything")
			}
			if r.Flow == nil || r.Flow.Admissions == 0 {
				t.Fatalf("no admission recorded: %+v", r.Flow)
			}
			found := map[string]bool{}
			for _, v := range r.Violations {
				found[v.Invariant] = true
			}
			if !found[InvConcurrency] {
				t.Errorf("no %s violation among %v", InvConcurrency, r.Violations)
			}
		})
	}
}

func TestLimitsOptionsRefused(t *testing.T) {
	for _, o := range []Options{
		{Store: "sqlite", Duration: time.Second, Command: workerCommand, Limits: true, FairnessBound: time.Second, Transport: "nats-embedded", OpenTransport: openTestBroker},
		{Store: "sqlite", Duration: time.Second, Command: workerCommand, FairnessBound: time.Second},
		{Store: "sqlite", Duration: time.Second, Command: workerCommand, Limits: true, FairnessBound: -time.Second},
		{Store: "sqlite", Duration: time.Second, Command: workerCommand, Break: BreakNoAdmission},
	} {
		if _, err := Run(t.Context(), o); err == nil {
			t.Errorf("Run(%+v) accepted", o)
		}
	}
}

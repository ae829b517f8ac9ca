package transporttest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
	"github.com/idemhq/idem/transport/transporttest"
)

const lease = 50 * time.Millisecond

var features = transporttest.Features{Lease: lease, Fencing: true, NativeDelay: true}

// mutantEnv names the broken transport a child process runs the suite on.
const mutantEnv = "TRANSPORTTEST_MUTANT"

// TestSuiteCatchesBrokenTransports runs the suite, in a child process, on
// transports with one deliberate bug each, and checks that the subtest meant
// to catch the bug fails.
func TestSuiteCatchesBrokenTransports(t *testing.T) {
	if bug := os.Getenv(mutantEnv); bug != "" {
		transporttest.Run(t, features, func(t *testing.T) transport.Transport {
			return &mutant{Transport: memtransport.New(&memtransport.Config{Lease: lease}), bug: bug}
		})
		return
	}
	for _, tc := range []struct {
		bug     string
		subtest string
	}{
		{"ack-swallows-lease-lost", "LateAckAfterLeaseLostIsFenced"},
		{"receive-ignores-max", "ReceiveBatchRespectsMax"},
		{"ack-does-nothing", "AckedNotRedelivered"},
		{"nack-ignores-delay", "NackRedelivers/Delay"},
		{"attempt-always-one", "UnackedRedeliveredAfterLease"},
		{"drops-headers", "PublishThenReceive"},
		{"close-is-noop", "CloseReturnsErrClosed"},
	} {
		t.Run(tc.bug, func(t *testing.T) {
			t.Parallel()
			pattern := "^" + t.Name()[:strings.IndexByte(t.Name(), '/')] + "$"
			for _, part := range strings.Split(tc.subtest, "/") {
				pattern += "/^" + part + "$"
			}
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run="+pattern, "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), mutantEnv+"="+tc.bug)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a transport whose bug is %q, want %s to fail; output:\n%s", tc.bug, tc.subtest, out)
			}
			if want := "--- FAIL: " + t.Name()[:strings.IndexByte(t.Name(), '/')] + "/" + tc.subtest; !strings.Contains(string(out), want) {
				t.Fatalf("output lacks %q; output:\n%s", want, out)
			}
		})
	}
}

// mutant is a memtransport.Transport with one bug.
type mutant struct {
	*memtransport.Transport
	bug string
}

func (m *mutant) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	if m.bug == "receive-ignores-max" {
		max = 2*max + 1
	}
	ds, err := m.Transport.Receive(ctx, max)
	for i := range ds {
		switch m.bug {
		case "attempt-always-one":
			ds[i].Attempt = 1
		case "drops-headers":
			ds[i].Envelope.Headers = nil
		}
	}
	return ds, err
}

func (m *mutant) Ack(ctx context.Context, ds []transport.Delivery) error {
	switch m.bug {
	case "ack-does-nothing":
		return nil
	case "ack-swallows-lease-lost":
		_ = m.Transport.Ack(ctx, ds)
		return nil
	}
	return m.Transport.Ack(ctx, ds)
}

func (m *mutant) Nack(ctx context.Context, d transport.Delivery, delay time.Duration) error {
	if m.bug == "nack-ignores-delay" {
		delay = 0
	}
	return m.Transport.Nack(ctx, d, delay)
}

func (m *mutant) Close() error {
	if m.bug == "close-is-noop" {
		return nil
	}
	return m.Transport.Close()
}

package transporttest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
	"github.com/idemhq/idem/transport/transporttest"
)

const lease = 50 * time.Millisecond

// maxBytes is the size limit of the transports under test.
const maxBytes = 4 << 10

var features = transporttest.Features{Lease: lease, Fencing: true, NativeDelay: true, Partitioned: true, SizeLimit: true, Pending: true, PublishDedup: true}

// mutantEnv names the broken transport a child process runs the suite on.
const mutantEnv = "TRANSPORTTEST_MUTANT"

// TestSuiteCatchesBrokenTransports runs the suite, in a child process, on
// transports with one deliberate bug each, and checks that the subtest meant
// to catch the bug fails. The bug "none" is the control: the same wrapper
// without a bug passes the whole suite, every capability case included.
func TestSuiteCatchesBrokenTransports(t *testing.T) {
	if bug := os.Getenv(mutantEnv); bug != "" {
		transporttest.Run(t, features, func(t *testing.T) transport.Transport {
			limit := maxBytes
			switch bug {
			case "size-limit-unenforced":
				limit = 0 // MaxMessageBytes still reports maxBytes
			case "size-limit-off-by-one":
				limit = maxBytes - 1
			}
			window := time.Hour
			if bug == "dedup-none" {
				window = 0
			}
			return &mutant{Transport: memtransport.New(&memtransport.Config{Lease: lease, MaxMessageBytes: limit, DedupWindow: window}), bug: bug, seen: map[string]bool{}}
		})
		return
	}
	for _, tc := range []struct {
		bug     string
		subtest string
	}{
		{"none", ""},
		{"ack-swallows-lease-lost", "LateAckAfterLeaseLostIsFenced"},
		{"receive-ignores-max", "ReceiveBatchRespectsMax"},
		{"ack-does-nothing", "AckedNotRedelivered"},
		{"nack-ignores-delay", "NackRedelivers/Delay"},
		{"attempt-always-one", "UnackedRedeliveredAfterLease"},
		{"drops-headers", "PublishThenReceive"},
		{"close-is-noop", "CloseReturnsErrClosed"},
		{"partition-ignored", "PartitionedReceive"},
		{"partition-by-raw-key", "PartitionedKeyForms"},
		{"size-limit-unenforced", "SizeLimit"},
		{"size-limit-off-by-one", "SizeLimit"},
		{"pending-counts-unacked-as-ready", "PendingCounts"},
		{"pending-counts-acked", "PendingCounts"},
		{"dedup-by-id", "RepublishAfterAck"},
		{"dedup-by-id-while-delayed", "RepublishWhileDelayed"},
		{"dedup-ignores-mark", "RepublishAfterAck"},
		{"dedup-none", "RepublishDedup"},
	} {
		t.Run(tc.bug, func(t *testing.T) {
			t.Parallel()
			if tc.subtest == "" {
				control(t)
				return
			}
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

// control runs the whole suite in a child process on the mutant wrapper
// without a bug, and fails unless every subtest passes and none skips
// but the Shared cases.
func control(t *testing.T) {
	pattern := "^" + t.Name()[:strings.IndexByte(t.Name(), '/')] + "$"
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run="+pattern, "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), mutantEnv+"=none")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the suite failed the wrapper without a bug: %v; output:\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		// memtransport has no shares (transport.SharedConsumer): the
		// Shared cases are proven on pgstore, the one transport that has.
		if strings.Contains(line, "--- SKIP") && !strings.Contains(line, "/Shared") {
			t.Fatalf("the suite skipped cases on a transport that claims every feature but Shared; output:\n%s", out)
		}
	}
}

// mutant is a memtransport.Transport with one bug.
type mutant struct {
	*memtransport.Transport
	bug string

	mu   sync.Mutex
	seen map[string]bool // the dedup bugs' publish identities
}

// Publish drops, for the dedup bugs, what a broker deduplicating by the
// wrong identity would: by ID alone, or by ID and whether it is a
// re-publish whatever its mark.
func (m *mutant) Publish(ctx context.Context, envs []transport.Envelope) error {
	if !strings.HasPrefix(m.bug, "dedup-by-id") && m.bug != "dedup-ignores-mark" {
		return m.Transport.Publish(ctx, envs)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var keep []transport.Envelope
	for _, e := range envs {
		id := e.ID
		if _, ok := e.Headers[transport.HeaderRepublish]; ok && m.bug == "dedup-ignores-mark" {
			id += " republish"
		}
		if !m.seen[id] {
			m.seen[id] = true
			keep = append(keep, e)
		}
	}
	return m.Transport.Publish(ctx, keep)
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

func (m *mutant) ReceivePartition(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	switch m.bug {
	case "partition-ignored":
		return m.Transport.Receive(ctx, max)
	case "partition-by-raw-key":
		// Partitions by a hash of the raw CorrelationID: takes whatever
		// is ready and gives back what is not its own by that hash.
		for {
			ds, err := m.Transport.Receive(ctx, max)
			if err != nil {
				return nil, err
			}
			var own []transport.Delivery
			for _, d := range ds {
				key := d.Envelope.CorrelationID
				if key == "" {
					key = d.Envelope.ID
				}
				if parts < 2 || int(transport.PartitionHash(key)%uint32(parts)) == part {
					own = append(own, d)
				} else if err := m.Transport.Nack(ctx, d, lease/5); err != nil {
					return nil, err
				}
			}
			if len(own) > 0 {
				return own, nil
			}
		}
	}
	return m.Transport.ReceivePartition(ctx, max, part, parts)
}

func (m *mutant) MaxMessageBytes() int {
	if strings.HasPrefix(m.bug, "size-limit-") {
		return maxBytes
	}
	return m.Transport.MaxMessageBytes()
}

func (m *mutant) Pending(ctx context.Context) (ready, unacked int, err error) {
	ready, unacked, err = m.Transport.Pending(ctx)
	switch m.bug {
	case "pending-counts-unacked-as-ready":
		return ready + unacked, 0, err
	case "pending-counts-acked":
		// Counts what was ever published, acked or not, as ready.
		return int(m.Transport.Stats().Published) - unacked, unacked, err
	}
	return ready, unacked, err
}

func (m *mutant) Close() error {
	if m.bug == "close-is-noop" {
		return nil
	}
	return m.Transport.Close()
}

package idem_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// childEnv names the test a re-executed test binary runs as a child, for
// scenarios that may crash the process.
const childEnv = "IDEM_TEST_CHILD"

// runChild re-runs the test binary for this test only, with childEnv set,
// and returns its combined output and error.
func runChild(t *testing.T) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	return cmd.CombinedOutput()
}

// A plain handler that panics must be contained like a saga handler's
// panic (dead letter, permanent_error), not crash the process: a poison
// message would otherwise crash-loop every replica.
func TestHandlerPanicIsContained(t *testing.T) {
	if os.Getenv(childEnv) == t.Name() {
		b := setup(t, &options{handlers: map[string]idem.HandlerFunc{auditType: func(context.Context, idem.Envelope) error {
			panic("kaboom")
		}}})
		b.publish(auditEnv("a-1"))
		b.settle()
		dls := b.deadLetters()
		if len(dls) != 1 || dls[0].Reason != idem.ReasonPermanent {
			t.Fatalf("got dead letters %+v, want a-1 with reason %s", dls, idem.ReasonPermanent)
		}
		return
	}
	t.Parallel()
	out, err := runChild(t)
	if err != nil {
		if i := bytes.Index(out, []byte("panic: ")); i >= 0 {
			out = out[i:]
		}
		if len(out) > 1500 {
			out = out[:1500]
		}
		t.Fatalf("child process failed (%v): a panicking HandlerFunc took the engine down:\n%s", err, out)
	}
}

// Engine methods are documented as safe for concurrent use: building
// envelopes with Engine.NewEnvelope while a machine is being registered
// must not race. Run in a child process because an unsynchronised map
// access may also kill the process outright.
func TestConcurrentRegisterAndNewEnvelope(t *testing.T) {
	if os.Getenv(childEnv) == t.Name() {
		st, mem := memstore.New(nil), memtransport.New(nil)
		defer func() { _ = mem.Close(); _ = st.Close() }()
		e, err := idem.NewEngine(st, mem, &idem.Config{Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 100 {
				if _, err := e.NewEnvelope("id", Inc{Key: "k", N: 1}); err != nil {
					t.Error(err)
				}
			}
		}()
		if err := e.Register(newCounter(nil)); err != nil {
			t.Error(err)
		}
		<-done
		return
	}
	t.Parallel()
	out, err := runChild(t)
	if err != nil {
		if i := bytes.Index(out, []byte("WARNING: DATA RACE")); i >= 0 {
			out = out[i:]
		}
		if len(out) > 2500 {
			out = out[:2500]
		}
		t.Fatalf("child process failed (%v): Register and NewEnvelope race on the engine's machine map:\n%s", err, out)
	}
}

package idem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// syncBuffer is a log sink that tests read while the engine writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startDescribed starts an engine on st with a described counter (fp) and
// a machine that does not describe itself, and stops it when t ends.
func startDescribed(t *testing.T, st store.Store, logs *syncBuffer) *idem.Engine {
	t.Helper()
	e, err := idem.NewEngine(st, newMemTransport(t), &idem.Config{Logger: slog.New(slog.NewTextHandler(logs, nil)), HeartbeatInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []idem.Machine{newCounter(nil), newCounterNamed("plain")} {
		if err := e.Register(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	return e
}

// Start records the definition of each machine that describes itself, and
// the replica's heartbeats name it, so the store lists the replica on it.
func TestStartRecordsDefinitions(t *testing.T) {
	st := memstore.New(nil)
	e := startDescribed(t, st, &syncBuffer{})
	d := newCounter(nil).Describe()
	desc, _ := json.Marshal(d.Canonical())
	defs, err := st.Definitions(t.Context(), counterType)
	if err != nil || len(defs) != 1 || defs[0].Fingerprint != d.Fingerprint() || !bytes.Equal(defs[0].Description, desc) {
		t.Fatalf("definitions of %s after Start: got %+v, %v; want %s with its description", counterType, defs, err, d.Fingerprint())
	}
	waitReplicas(t, st, "the replica's definitions", func(rs map[string]store.Replica) bool {
		return maps.Equal(rs[e.ReplicaID()].Definitions, map[string]string{counterType: d.Fingerprint(), "plain": newCounterNamed("plain").Describe().Fingerprint()})
	})
	defs, err = st.Definitions(t.Context(), counterType)
	if err != nil || len(defs) != 1 || !slices.Equal(defs[0].Replicas, []string{e.ReplicaID()}) {
		t.Errorf("definitions of %s: got %+v, %v; want it run by replica %s", counterType, defs, err, e.ReplicaID())
	}
}

// refusingDefinitions is a memstore whose definition registry refuses
// every record.
type refusingDefinitions struct{ *memstore.Store }

func (refusingDefinitions) RecordDefinitions(context.Context, time.Time, []store.Definition) error {
	return &store.RejectedError{Field: "definition", Err: errors.New("no such thing")}
}

// A store that refuses the definitions does not stop Start: the check
// warns, naming itself and what to change, and the heartbeats name no
// definition.
func TestStartWarnsWhenDefinitionsRefused(t *testing.T) {
	st := refusingDefinitions{memstore.New(nil)}
	logs := &syncBuffer{}
	e := startDescribed(t, st, logs)
	l := logs.String()
	if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "check=definitions") || !strings.Contains(l, "rename the saga types") {
		t.Errorf("log %q: want a warning of check definitions saying what to change", l)
	}
	rs := waitReplicas(t, st, "the replica's beat", func(rs map[string]store.Replica) bool { _, ok := rs[e.ReplicaID()]; return ok })
	if d := rs[e.ReplicaID()].Definitions; d != nil {
		t.Errorf("replica's definitions after a refused record: got %v, want none", d)
	}
}

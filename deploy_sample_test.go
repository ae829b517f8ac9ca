package idem_test

import (
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

type sampledOrder struct {
	Items int `json:"items"`
}

// SampledPlaced starts a sampledOrder.
type SampledPlaced struct{ ID string }

// sampledMachine is at schema version 2: its upgrade from 1 refuses a
// document whose items is not a number.
func sampledMachine() *saga.Machine[sampledOrder] {
	m := saga.New[sampledOrder]("sampled-order")
	m.Upgrade(1, func(old json.RawMessage) (json.RawMessage, error) {
		var v struct{ Items any }
		if err := json.Unmarshal(old, &v); err != nil {
			return nil, err
		}
		if _, ok := v.Items.(float64); !ok {
			return nil, errors.New("items is not a number")
		}
		return old, nil
	})
	open := m.State("Open")
	placed := saga.NewEvent[SampledPlaced](m, func(e SampledPlaced) string { return e.ID })
	m.Initially(saga.When(placed).TransitionTo(open))
	m.During(open, saga.Ignore(placed))
	return m
}

// Config.DeployCheckSample makes the start-up deploy check decode live
// state documents: a build whose upgrade cannot read one is refused,
// naming the key, and without the sample the same build starts.
func TestDeployCheckSampleRefusesUndecodableState(t *testing.T) {
	t.Parallel()
	st, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	var ins []*store.Instance
	for key, data := range map[string]string{"o-1": `{"items":1}`, "o-2": `{"items":"two"}`, "o-3": `{"items":3}`} {
		ins = append(ins, &store.Instance{SagaType: "sampled-order", Key: key, State: "Open", Data: []byte(data), SchemaVersion: 1, Version: 1, CreatedAt: now, UpdatedAt: now})
	}
	uow, err := st.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(t.Context(), &store.Changes{Inserts: ins}); err != nil {
		t.Fatal(err)
	}
	start := func(sample int) error {
		e, err := idem.NewEngine(st, st, &idem.Config{Logger: slog.New(slog.DiscardHandler), DeployCheck: idem.DeployCheckRefuse, DeployCheckSample: sample})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Register(sampledMachine()); err != nil {
			t.Fatal(err)
		}
		if err := e.Start(t.Context()); err != nil {
			return err
		}
		return e.Stop(t.Context())
	}
	err = start(10)
	var sce *idem.StartCheckError
	if !errors.As(err, &sce) || sce.Check != "deploy" || !strings.Contains(err.Error(), "state-undecodable") || !strings.Contains(err.Error(), `1 of 3 sampled`) || !strings.Contains(err.Error(), `key "o-2"`) {
		t.Fatalf("Start with DeployCheckSample 10 and a document its upgrade refuses: %v; want the deploy check's refusal naming state-undecodable, 1 of 3 and key o-2", err)
	}
	if err := start(0); err != nil {
		t.Errorf("Start without a sample: %v; want it to start (nothing else changed)", err)
	}
}

// A negative Config.DeployCheckSample is refused with what to change.
func TestDeployCheckSampleValidated(t *testing.T) {
	t.Parallel()
	_, err := idem.NewEngine(memstore.New(nil), newMemTransport(t), &idem.Config{DeployCheckSample: -1})
	if err == nil || !strings.Contains(err.Error(), "Config.DeployCheckSample is -1") {
		t.Errorf("DeployCheckSample -1: %v; want an error naming the field", err)
	}
}

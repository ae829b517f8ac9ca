package saga_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/saga"
)

// Counter is the state document of the counter machine.
type Counter struct {
	N int `json:"n"`
	// Applied lists the IDs of the Inc messages the saga applied.
	Applied []string `json:"applied,omitempty"`
}

// Inc adds N to the counter Key.
type Inc struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// Close closes the counter Key; a closed counter ignores everything.
type Close struct {
	Key string `json:"key"`
}

// Added is published once per applied Inc.
type Added struct {
	MessageID string
	N         int
}

// Closed is published when the counter closes.
type Closed struct{ Total int }

func counterMachine() (m *saga.Machine[Counter], open, closed saga.State) {
	m = saga.New[Counter]("counter")
	open, closed = m.State("Open"), m.Final("Closed")
	inc := saga.NewEvent[Inc](m, func(e Inc) string { return e.Key })
	cl := saga.NewEvent[Close](m, func(e Close) string { return e.Key })
	add := func(c *saga.Context[Counter], e Inc) error {
		c.Data.N += e.N
		c.Data.Applied = append(c.Data.Applied, c.MessageID())
		c.Publish(Added{MessageID: c.MessageID(), N: e.N})
		return nil
	}
	finish := func(c *saga.Context[Counter], _ Close) error {
		c.Publish(Closed{Total: c.Data.N})
		return nil
	}
	m.Initially(saga.When(inc).Then(add).TransitionTo(open), saga.When(cl).Then(finish).TransitionTo(closed))
	m.During(open, saga.When(inc).Then(add), saga.When(cl).Then(finish).TransitionTo(closed))
	return m, open, closed
}

// counterDelivery maps a fuzzer byte to a delivery: a message ID and its
// message. Equal bytes are redeliveries of one message (same ID, same body);
// there are 16 Inc messages and 4 Close messages.
func counterDelivery(b byte) (id string, msg any) {
	if b >= 0xF0 {
		return fmt.Sprintf("close-%d", b&0x03), Close{Key: "c-1"}
	}
	n := int(b%16)*3 - 7
	return fmt.Sprintf("inc-%d", b%16), Inc{Key: "c-1", N: n}
}

// FuzzApplyInvariants feeds a counter saga a fuzzer-chosen sequence of
// deliveries, with duplicates and in any order, through an engine-like loop
// (decode, inbox check, apply, commit) and checks that every effect happens
// once: the counter is the sum of the distinct Incs delivered before the
// first Close, each of them published exactly one Added, nothing applies
// after Close, and Apply is deterministic and leaves its input alone.
func FuzzApplyInvariants(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		{0x01},
		{0x01, 0x02, 0x03, 0xF0},
		{0x05, 0x05, 0x05, 0x15, 0x25},
		{0xF0, 0x01, 0xF0},
		{0x01, 0x02, 0x01, 0xF1, 0x03, 0xF1, 0x02, 0xF2},
		bytes.Repeat([]byte{0x0A, 0x0B, 0x0A}, 20),
	} {
		f.Add(seed)
	}
	m, open, closed := counterMachine()
	if err := m.Validate(); err != nil {
		f.Fatalf("Validate of the counter machine: got %v, want nil", err)
	}
	f.Fuzz(func(t *testing.T, deliveries []byte) {
		var (
			// Stored saga, as the engine would keep it.
			exists  bool
			state   saga.State
			data    []byte
			version int
			// Engine inbox and outbox.
			inbox = map[string]bool{}
			added = map[string]int{}
			// Model.
			want      int
			wantIncs  []string
			isClosed  bool
			sawClose  bool
			published int // Closed events
		)
		for i, b := range deliveries {
			id, msg := counterDelivery(b)
			if inbox[id] {
				continue // duplicate: the inbox drops it before Apply
			}
			typ := saga.MessageType(msg)
			decoded, key, err := m.Decode(typ, mustJSON(msg))
			if err != nil {
				t.Fatalf("delivery %d (%s): Decode: got error %v, want nil", i, id, err)
			}
			if key != "c-1" || !reflect.DeepEqual(decoded, msg) {
				t.Fatalf("delivery %d (%s): Decode: got %#v, %q; want %#v, %q", i, id, decoded, key, msg, "c-1")
			}
			in := saga.Input{
				Exists: exists, State: state, Data: data, SchemaVersion: version,
				Msg: decoded, MsgType: typ, Key: key, MessageID: id,
				Now: t0.Add(time.Duration(i) * time.Second),
			}
			before := bytes.Clone(data)
			res, err := m.Apply(in)
			if err != nil {
				t.Fatalf("delivery %d (%s) in %q: Apply: got error %v, want nil", i, id, state, err)
			}
			again, err := m.Apply(in)
			if err != nil || !reflect.DeepEqual(again, res) {
				t.Fatalf("delivery %d (%s): Apply is not deterministic:\nfirst  %+v\nsecond %+v, %v", i, id, res, again, err)
			}
			if !bytes.Equal(data, before) {
				t.Fatalf("delivery %d (%s): Apply changed Input.Data from %s to %s", i, id, before, data)
			}

			switch e := msg.(type) {
			case Inc:
				if !isClosed {
					want += e.N
					wantIncs = append(wantIncs, id)
				}
			case Close:
				sawClose = true
			}
			switch {
			case isClosed:
				if res.Outcome != saga.Ignored || res.From != closed || res.To != closed {
					t.Fatalf("delivery %d (%s) after Close: got %v %q -> %q, want ignored in %q", i, id, res.Outcome, res.From, res.To, closed)
				}
				if res.Data != nil || res.Emitted != nil {
					t.Fatalf("delivery %d (%s) after Close: got Data %s, Emitted %+v; want none", i, id, res.Data, res.Emitted)
				}
			case res.Outcome != saga.Applied:
				t.Fatalf("delivery %d (%s): got Outcome %v, want applied", i, id, res.Outcome)
			default:
				wantTo := open
				if _, ok := msg.(Close); ok {
					wantTo = closed
				}
				if res.To != wantTo || res.Finished != (wantTo == closed) {
					t.Fatalf("delivery %d (%s): got To %q, Finished %v; want %q, %v", i, id, res.To, res.Finished, wantTo, wantTo == closed)
				}
				exists, state, data, version = true, res.To, res.Data, res.SchemaVersion
				isClosed = res.Finished
				for _, em := range res.Emitted {
					switch e := em.Msg.(type) {
					case Added:
						added[e.MessageID]++
					case Closed:
						published++
						if e.Total != want {
							t.Fatalf("delivery %d (%s): Closed.Total: got %d, want %d", i, id, e.Total, want)
						}
					}
				}
				if got := decodeData[Counter](t, data); got.N != want {
					t.Fatalf("delivery %d (%s): counter: got %d, want %d", i, id, got.N, want)
				}
			}
			inbox[id] = true
		}

		wantPublished := 0
		if sawClose {
			wantPublished = 1
		}
		if published != wantPublished {
			t.Fatalf("Closed published %d times, want %d", published, wantPublished)
		}
		if !exists {
			if len(deliveries) != 0 {
				t.Fatalf("no saga after %d deliveries", len(deliveries))
			}
			return
		}
		got := decodeData[Counter](t, data)
		if got.N != want {
			t.Errorf("final counter: got %d, want %d (sum of distinct Incs before Close)", got.N, want)
		}
		if !slices.Equal(got.Applied, wantIncs) {
			t.Errorf("applied Incs: got %q, want %q", got.Applied, wantIncs)
		}
		for _, id := range wantIncs {
			if added[id] != 1 {
				t.Errorf("Added for %s published %d times, want once", id, added[id])
			}
		}
		if len(added) != len(wantIncs) {
			t.Errorf("Added published for %d messages, want %d", len(added), len(wantIncs))
		}
	})
}

// TestCounterMachineDocument pins the JSON shape the fuzz target decodes.
func TestCounterMachineDocument(t *testing.T) {
	m, open, _ := counterMachine()
	res, err := m.Apply(saga.Input{Msg: Inc{Key: "c-1", N: 2}, MsgType: saga.MessageType(Inc{}), Key: "c-1", MessageID: "inc-1", Now: t0})
	if err != nil {
		t.Fatalf("Apply: got error %v, want nil", err)
	}
	if want := `{"n":2,"applied":["inc-1"]}`; string(res.Data) != want || res.To != open {
		t.Errorf("Apply: got %s in %q, want %s in %q", res.Data, res.To, want, open)
	}
	var c Counter
	if err := json.Unmarshal(res.Data, &c); err != nil || c.N != 2 {
		t.Errorf("decode: got %+v, %v; want N 2", c, err)
	}
}

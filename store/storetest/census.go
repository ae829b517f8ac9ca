package storetest

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
	"github.com/idemhq/idem/transport"
)

// censusCases are the contract lines of readmodel.Censuser, what a deploy
// check reads. They run with the other testCases.
var censusCases = []testCase{
	{"CensusCountsWhatADeployServes", testCensus},
}

func init() { testCases = append(testCases, censusCases...) }

// Census counts live sagas by type, state and schema version (finished
// ones left out), timers by the state of their saga ("" for a saga that
// is gone), unsent outbox and
// queued messages by type, and attributes, each in byte order, hostile
// names included.
func testCensus(t *testing.T, s store.Store) {
	c, ok := s.(readmodel.Censuser)
	if !ok {
		t.Skip("the store is not a readmodel.Censuser: idem deploy check cannot read it")
	}
	at := now()
	in := func(typ, k, state string, version int) *store.Instance {
		i := newInstance(typ, k, at)
		i.State, i.SchemaVersion, i.Timers = state, version, nil
		return i
	}
	hostile := "<script>ש\u200f"
	ins := []*store.Instance{
		in("order", "o-1", "Paid", 1), in("order", "o-2", "Paid", 1), in("order", "o-3", "Paid", 2),
		in("order", "o-4", "Placed", 1), in("invoice", "i-1", hostile, 1),
	}
	done := in("order", "o-5", "Shipped", 1)
	done.FinishedAt = at
	ins[0].Attributes = map[string]string{"customer": "c-1"}
	ins[1].Attributes = map[string]string{"customer": "c-2", "region": "eu"}
	ins = append(ins, done)
	tm := func(k, name, typ string) store.Timer {
		x := timer("order", k, name, "t-"+k+"-"+name, at)
		x.Envelope.Type = typ
		return x
	}
	out := func(id, typ string) store.OutboxMessage {
		m := store.OutboxMessage{Envelope: envelope(id, at), CreatedAt: at}
		m.Envelope.Type = typ
		return m
	}
	commit(t, s, &store.Changes{
		Inserts: ins,
		Timers:  []store.Timer{tm("o-1", "remind", "orders.Remind"), tm("o-2", "remind", "orders.Remind"), tm("o-4", "expire", "orders.Expired"), tm("gone", "expire", "orders.Expired")},
		Outbox:  []store.OutboxMessage{out("m-1", "orders.Ship"), out("m-2", "orders.Ship"), out("m-3", "orders.Ship"), out("m-4", "bills.Send")},
	})
	if err := s.MarkSent(t.Context(), []string{"m-3"}, at); err != nil {
		t.Fatalf("mark m-3 sent: %v", err)
	}
	var queued []readmodel.MessageCount
	if q, ok := s.(store.Queue); ok {
		envs := []transport.Envelope{envelope("q-1", at), envelope("q-2", at)}
		envs[1].Type = "orders.Pay"
		if err := q.Publish(t.Context(), envs); err != nil {
			t.Fatalf("publish: %v", err)
		}
		queued = []readmodel.MessageCount{{Type: "orders.Pay", Where: readmodel.InQueue, Count: 1}, {Type: "test.Ping", Where: readmodel.InQueue, Count: 1}}
	}
	got, err := c.Census(t.Context())
	if err != nil {
		t.Fatalf("Census: %v", err)
	}
	want := &readmodel.Census{
		States: []readmodel.LiveStateCount{
			{SagaType: "invoice", State: hostile, SchemaVersion: 1, Count: 1},
			{SagaType: "order", State: "Paid", SchemaVersion: 1, Count: 2},
			{SagaType: "order", State: "Paid", SchemaVersion: 2, Count: 1},
			{SagaType: "order", State: "Placed", SchemaVersion: 1, Count: 1},
		},
		Timers: []readmodel.TimerCount{
			{SagaType: "order", State: "", Name: "expire", EventType: "orders.Expired", Count: 1},
			{SagaType: "order", State: "Paid", Name: "remind", EventType: "orders.Remind", Count: 2},
			{SagaType: "order", State: "Placed", Name: "expire", EventType: "orders.Expired", Count: 1},
		},
		Messages: append([]readmodel.MessageCount{
			{Type: "bills.Send", Where: readmodel.InOutbox, Count: 1},
			{Type: "orders.Ship", Where: readmodel.InOutbox, Count: 2},
		}, queued...),
		Attributes: []readmodel.AttributeCount{{SagaType: "order", Name: "customer", Count: 2}, {SagaType: "order", Name: "region", Count: 1}},
	}
	sortMessages(want.Messages)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Census:\n got %s\nwant %s", fmt.Sprintf("%+v", *got), fmt.Sprintf("%+v", *want))
	}
}

// sortMessages orders ms by type, then place, as Census does.
func sortMessages(ms []readmodel.MessageCount) {
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && (ms[j].Type < ms[j-1].Type || ms[j].Type == ms[j-1].Type && ms[j].Where < ms[j-1].Where); j-- {
			ms[j], ms[j-1] = ms[j-1], ms[j]
		}
	}
}

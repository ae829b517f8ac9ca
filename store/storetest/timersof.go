package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// manyTimers is how many timers of other sagas testTimersOfSaga schedules
// ahead of the saga it looks up: more than one page of any listing, so
// that a lookup that pages through ListTimers with a small bound misses
// it. (The operations tools once scanned at most 10,000 timers; their own
// test, with that bound lowered, checks that a lookup by key no longer
// scans. Ten thousand rows here would make the suite slow under -race.)
const manyTimers = 1_050

// TimersOf finds the timers of one saga by its key, however many timers of
// other sagas are due before them, and by key alone across saga types.
func testTimersOfSaga(t *testing.T, s store.Store) {
	ctx := t.Context()
	base := now()
	ts := make([]store.Timer, 0, manyTimers+4)
	for i := range manyTimers {
		ts = append(ts, timer("order", fmt.Sprintf("k-%05d", i), "expire", fmt.Sprintf("early-%d", i), base.Add(time.Duration(i)*time.Millisecond)))
	}
	late := base.Add(time.Hour)
	want := []store.Timer{
		timer("order", "target", "b-remind", "t-b", late),
		timer("order", "target", "a-expire", "t-a", late.Add(time.Minute)),
		timer("order", "target", "c-same-due", "t-c", late.Add(time.Minute)),
	}
	other := timer("invoice", "target", "pay", "t-invoice", late.Add(30*time.Second))
	ts = append(ts, want[2], want[0], other, want[1])
	commit(t, s, &store.Changes{Timers: ts})

	check := func(what string, k store.Key, want []store.Timer) {
		t.Helper()
		got, err := s.TimersOf(ctx, k)
		if err != nil {
			t.Fatalf("%s: TimersOf(%q, %q): got error %v, want nil", what, k.SagaType, k.Key, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: TimersOf(%q, %q): got %d timers %q, want %d", what, k.SagaType, k.Key, len(got), timerIDs(got), len(want))
		}
		for i := range got {
			checkTimer(t, fmt.Sprintf("%s: timer %d", what, i), got[i], want[i])
		}
	}
	check("one saga behind 1,050 earlier timers", key("order", "target"), want)
	check("one saga among the earliest", key("order", "k-00000"), ts[:1])
	check("a key in every saga type", key("", "target"), []store.Timer{want[0], other, want[1], want[2]})
	check("a saga without timers", key("order", "missing"), nil)
	check("a type without timers", key("shipment", "target"), nil)
	check("an empty key", key("order", ""), nil)
	check("an empty key in every type", key("", ""), nil)
	for _, hostile := range []string{"tar\x00get", "\xff\xfe", "<script>alert(1)</script>"} {
		check(fmt.Sprintf("hostile key %q", hostile), key("order", hostile), nil)
		check(fmt.Sprintf("hostile key %q in every type", hostile), key("", hostile), nil)
		check(fmt.Sprintf("hostile type %q", hostile), key(hostile, "target"), nil)
	}

	// The timers returned are copies, and a cancelled timer is gone.
	got, err := s.TimersOf(ctx, key("order", "target"))
	if err != nil {
		t.Fatalf("TimersOf: got error %v, want nil", err)
	}
	got[0].Envelope.Body[0] = 'X'
	got[0].Envelope.Headers["mutated"] = "yes"
	commit(t, s, &store.Changes{CancelTimers: []store.TimerKey{{SagaType: "order", Key: "target", Name: "a-expire"}}})
	check("after a cancel", key("order", "target"), []store.Timer{want[0], want[2]})
}

package ledger_test

import (
	"fmt"

	"github.com/idemhq/idem/examples/dispatch/ledger"
)

// Validate replays a ledger and reports what breaks replay safety. Here the
// incident's rows: seq 44 CONFIRMED and seq 45 LAUNCHED each written twice
// under wall-clock keys, and a late copy of seq 44 after seq 45.
func ExampleValidate() {
	p, _ := ledger.NewPseudonymizer([]byte("example-key-not-for-production-0123456789"))
	pn, _ := p.Pseudonym("756.9999.0091.44")
	row := func(pos, seq int64, k ledger.Kind, id string) ledger.Row {
		if id == "" {
			id = ledger.EventID(pn, seq, k)
		}
		return ledger.Row{Position: pos, EventID: id, Patient: pn, Seq: seq, Kind: k}
	}
	note := func(pos int64, r ledger.Row) ledger.Notification {
		return ledger.Notification{Position: pos, EventID: r.EventID}
	}

	// What the Idem writer leaves: each event once, one notification each.
	good := []ledger.Row{row(1, 1, ledger.Requested, ""), row(2, 2, ledger.Confirmed, ""), row(3, 3, ledger.Launched, "")}
	rep := ledger.Validate(good, []ledger.Notification{note(1, good[0]), note(2, good[1]), note(3, good[2])})
	fmt.Println("idem writer ok:", rep.OK(), "state:", ledger.Replay(good)[pn].Status)

	// What the naive writer leaves.
	bad := []ledger.Row{
		row(1, 1, ledger.Requested, ""),
		row(2, 2, ledger.Confirmed, "91f:1716171221102"),
		row(3, 2, ledger.Confirmed, "91f:1716171221188"),
		row(4, 3, ledger.Launched, "91f:1716171221204"),
		row(5, 3, ledger.Launched, "91f:1716171221231"),
	}
	var notes []ledger.Notification
	for i, r := range bad {
		notes = append(notes, note(int64(i+1), r))
	}
	for _, v := range ledger.Validate(bad, notes).Violations {
		fmt.Println(v.Check, v.Seq, v.Kind, v.Positions)
	}
	// Output:
	// idem writer ok: true state: LAUNCHED
	// key_mismatch 2 CONFIRMED [2]
	// key_mismatch 3 LAUNCHED [4]
	// duplicate_identity 2 CONFIRMED [2 3]
	// duplicate_identity 3 LAUNCHED [4 5]
	// duplicate_notification 2 CONFIRMED [2 3]
	// duplicate_notification 3 LAUNCHED [4 5]
}

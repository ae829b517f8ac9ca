package ledger_test

import (
	"testing"

	"github.com/idemhq/idem/examples/dispatch/ledger"
)

func TestEventIDIsDeterministic(t *testing.T) {
	p := pseudonymizer(t)
	a, _ := p.Pseudonym(rawID(1))
	b, _ := p.Pseudonym(rawID(2))
	id := ledger.EventID(a, 44, ledger.Confirmed)
	if id != ledger.EventID(a, 44, ledger.Confirmed) {
		t.Fatal("EventID not deterministic")
	}
	seen := map[string]bool{id: true}
	for _, other := range []string{ledger.EventID(a, 45, ledger.Confirmed), ledger.EventID(a, 44, ledger.Launched), ledger.EventID(b, 44, ledger.Confirmed)} {
		if seen[other] {
			t.Fatalf("collision on %s", other)
		}
		seen[other] = true
	}
}

func TestPseudonymIsKeyedAndCanonical(t *testing.T) {
	p := pseudonymizer(t)
	x, err := p.Pseudonym("Zoë-1")
	if err != nil || !ledger.ValidPseudonym(x) {
		t.Fatalf("Pseudonym = %q, %v", x, err)
	}
	if y, _ := p.Pseudonym(" Zoe\u0308-1 "); y != x { // NFD, spaces
		t.Errorf("NFD form gives another pseudonym: %s vs %s", y, x)
	}
	q, _ := ledger.NewPseudonymizer([]byte("another-key-0123456789abcdef0123456789"))
	if z, _ := q.Pseudonym("Zoë-1"); z == x {
		t.Error("pseudonym does not depend on the key")
	}
	if _, err := ledger.NewPseudonymizer([]byte("short")); err == nil {
		t.Error("short key accepted")
	}
	for _, bad := range []string{"", "  ", "a\x00b"} {
		if _, err := p.Pseudonym(bad); err == nil {
			t.Errorf("Pseudonym(%q) accepted", bad)
		}
	}
	if ledger.ValidPseudonym(rawID(1)) {
		t.Error("raw id taken for a pseudonym")
	}
}

func TestValidateReportsEachCheck(t *testing.T) {
	pn, _ := pseudonymizer(t).Pseudonym(rawID(1))
	r := func(pos, seq int64, k ledger.Kind) ledger.Row {
		return ledger.Row{Position: pos, EventID: ledger.EventID(pn, seq, k), Patient: pn, Seq: seq, Kind: k}
	}
	notesFor := func(rows []ledger.Row) []ledger.Notification {
		var ns []ledger.Notification
		for _, x := range rows {
			ns = append(ns, ledger.Notification{Position: x.Position, EventID: x.EventID})
		}
		return ns
	}
	cases := []struct {
		name  string
		rows  []ledger.Row
		notes []ledger.Notification // nil: one per row
		want  string
	}{
		{"out of order", []ledger.Row{r(1, 1, ledger.Requested), r(2, 3, ledger.Launched), r(3, 2, ledger.Confirmed)}, nil, "seq_order"},
		{"gap", []ledger.Row{r(1, 1, ledger.Requested), r(2, 3, ledger.Cancelled)}, nil, "seq_order"},
		{"illegal", []ledger.Row{r(1, 1, ledger.Requested), r(2, 2, ledger.Launched)}, nil, "illegal_transition"},
		{"after terminal", []ledger.Row{r(1, 1, ledger.Requested), r(2, 2, ledger.Cancelled), r(3, 3, ledger.Confirmed)}, nil, "illegal_transition"},
		{"first not requested", []ledger.Row{r(1, 1, ledger.Confirmed)}, nil, "illegal_transition"},
		{"conflicting seq", []ledger.Row{r(1, 1, ledger.Requested), r(2, 2, ledger.Confirmed), r(3, 2, ledger.Cancelled)}, nil, "conflicting_seq"},
		{"duplicate", []ledger.Row{r(1, 1, ledger.Requested), r(2, 1, ledger.Requested)}, nil, "duplicate_identity"},
		{"raw id", []ledger.Row{{Position: 1, EventID: ledger.EventID(rawID(1), 1, ledger.Requested), Patient: rawID(1), Seq: 1, Kind: ledger.Requested}}, nil, "invalid_row"},
		{"missing notification", []ledger.Row{r(1, 1, ledger.Requested)}, []ledger.Notification{}, "missing_notification"},
		{"orphan notification", []ledger.Row{r(1, 1, ledger.Requested)}, []ledger.Notification{{Position: 1, EventID: ledger.EventID(pn, 1, ledger.Requested)}, {Position: 2, EventID: "x"}}, "orphan_notification"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			notes := c.notes
			if notes == nil {
				notes = notesFor(c.rows)
			}
			rep := ledger.Validate(c.rows, notes)
			found := false
			for _, v := range rep.Violations {
				found = found || v.Check == c.want
			}
			if !found {
				t.Errorf("violations %+v: want a %s", rep.Violations, c.want)
			}
		})
	}
	good := []ledger.Row{r(1, 1, ledger.Requested), r(2, 2, ledger.Cancelled), r(3, 3, ledger.Requested), r(4, 4, ledger.Confirmed), r(5, 5, ledger.Launched)}
	if rep := ledger.Validate(good, notesFor(good)); !rep.OK() {
		t.Errorf("clean ledger reported %+v", rep.Violations)
	}
	if st := ledger.Replay(good)[pn]; st != (ledger.PatientState{LastSeq: 5, Mission: 3, Status: ledger.Launched}) {
		t.Errorf("replay: %+v", st)
	}
}

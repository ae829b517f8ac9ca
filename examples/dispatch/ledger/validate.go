package ledger

import (
	"cmp"
	"fmt"
	"slices"
)

// Violation is one breach of a ledger invariant found by Validate.
type Violation struct {
	// Check names the invariant: duplicate_identity, duplicate_event_id,
	// conflicting_seq, key_mismatch, seq_order, illegal_transition,
	// invalid_row, duplicate_notification, missing_notification or
	// orphan_notification.
	Check   string `json:"check"`
	Patient string `json:"patient,omitempty"`
	Seq     int64  `json:"seq,omitempty"`
	Kind    Kind   `json:"kind,omitempty"`
	EventID string `json:"event_id,omitempty"`
	// Positions are the ledger positions (or notification positions) involved.
	Positions []int64 `json:"positions,omitempty"`
	Detail    string  `json:"detail"`
}

// PatientState is a patient's current dispatch state, derived by replaying
// the ledger.
type PatientState struct {
	// LastSeq is the sequence number of the patient's last event.
	LastSeq int64 `json:"last_seq"`
	// Mission is the sequence number of the REQUESTED that opened the
	// patient's current (or last) mission.
	Mission int64 `json:"mission"`
	// Status is the kind of the patient's last event.
	Status Kind `json:"status"`
}

// Report is the outcome of Validate.
type Report struct {
	Rows          int                     `json:"rows"`
	Notifications int                     `json:"notifications"`
	Patients      int                     `json:"patients"`
	Violations    []Violation             `json:"violations"`
	States        map[string]PatientState `json:"-"`
}

// OK reports whether the ledger broke no invariant.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

type identity struct {
	patient string
	seq     int64
	kind    Kind
}

// Validate checks that a ledger (rows in append order) and its notifications
// can be replayed safely, and replays it:
//
//   - uniqueness: each (patient, seq, kind) and each event ID appears once,
//     and a (patient, seq) holds one kind;
//   - key determinism: each event ID is EventID recomputed from the row;
//   - sequence monotonicity: a patient's events are appended in sequence
//     order 1, 2, 3, … without gaps;
//   - transition legality: replayed in sequence order, each event may follow
//     the previous one (see Legal);
//   - notifications: one per ledger event, none for an unknown event.
//
// Rows that repeat an identity are reported once as duplicates and left out
// of the other checks.
func Validate(rows []Row, notes []Notification) *Report {
	r := &Report{Rows: len(rows), Notifications: len(notes), Violations: []Violation{}, States: map[string]PatientState{}}
	add := func(v Violation) { r.Violations = append(r.Violations, v) }

	byIdentity := map[identity][]int64{}
	byEventID := map[string][]int64{}
	idOf := map[string]identity{}
	var firsts []Row // first row of each identity, in append order
	for _, row := range rows {
		id := identity{row.Patient, row.Seq, row.Kind}
		byEventID[row.EventID] = append(byEventID[row.EventID], row.Position)
		idOf[row.EventID] = id
		if byIdentity[id] = append(byIdentity[id], row.Position); len(byIdentity[id]) > 1 {
			continue
		}
		firsts = append(firsts, row)
		switch {
		case !ValidPseudonym(row.Patient), row.Seq < 1, !row.Kind.Valid():
			add(Violation{Check: "invalid_row", Patient: row.Patient, Seq: row.Seq, Kind: row.Kind, EventID: row.EventID,
				Positions: []int64{row.Position}, Detail: "patient is not a pseudonym, seq below 1 or unknown kind"})
		case row.EventID != EventID(row.Patient, row.Seq, row.Kind):
			add(Violation{Check: "key_mismatch", Patient: row.Patient, Seq: row.Seq, Kind: row.Kind, EventID: row.EventID,
				Positions: []int64{row.Position}, Detail: "event_id is not derived from (patient, seq, kind): want " + EventID(row.Patient, row.Seq, row.Kind)})
		}
	}
	for _, row := range firsts {
		id := identity{row.Patient, row.Seq, row.Kind}
		if ps := byIdentity[id]; len(ps) > 1 {
			add(Violation{Check: "duplicate_identity", Patient: row.Patient, Seq: row.Seq, Kind: row.Kind, EventID: row.EventID,
				Positions: ps, Detail: fmt.Sprintf("%s appended %d times", row.Kind, len(ps))})
		}
	}
	for _, row := range rows {
		if ps := byEventID[row.EventID]; len(ps) > 1 && ps[0] == row.Position {
			add(Violation{Check: "duplicate_event_id", EventID: row.EventID, Positions: ps,
				Detail: fmt.Sprintf("event_id used by %d rows", len(ps))})
		}
	}

	// Per patient: append order must be sequence order, and the sequence
	// must replay through legal transitions.
	perPatient := map[string][]Row{}
	var patients []string
	for _, row := range firsts {
		if _, ok := perPatient[row.Patient]; !ok {
			patients = append(patients, row.Patient)
		}
		perPatient[row.Patient] = append(perPatient[row.Patient], row)
	}
	r.Patients = len(patients)
	for _, p := range patients {
		evs := perPatient[p]
		var prev int64
		for _, e := range evs {
			switch {
			case e.Seq == prev:
				// Same seq, other kind: conflicting_seq below.
			case e.Seq < prev:
				add(Violation{Check: "seq_order", Patient: p, Seq: e.Seq, Kind: e.Kind, EventID: e.EventID, Positions: []int64{e.Position},
					Detail: fmt.Sprintf("seq %d appended after seq %d", e.Seq, prev)})
			case e.Seq > prev+1:
				add(Violation{Check: "seq_order", Patient: p, Seq: e.Seq, Kind: e.Kind, EventID: e.EventID, Positions: []int64{e.Position},
					Detail: fmt.Sprintf("seq %d appended after seq %d: gap", e.Seq, prev)})
			}
			prev = max(prev, e.Seq)
		}
		bySeq := slices.Clone(evs)
		slices.SortStableFunc(bySeq, func(a, b Row) int { return cmp.Compare(a.Seq, b.Seq) })
		var st PatientState
		for i, e := range bySeq {
			if i > 0 && bySeq[i-1].Seq == e.Seq {
				add(Violation{Check: "conflicting_seq", Patient: p, Seq: e.Seq, Kind: e.Kind, EventID: e.EventID,
					Positions: []int64{bySeq[i-1].Position, e.Position}, Detail: fmt.Sprintf("seq %d holds %s and %s", e.Seq, bySeq[i-1].Kind, e.Kind)})
				continue
			}
			if !Legal(st.Status, e.Kind) {
				from := string(st.Status)
				if from == "" {
					from = "(start)"
				}
				add(Violation{Check: "illegal_transition", Patient: p, Seq: e.Seq, Kind: e.Kind, EventID: e.EventID, Positions: []int64{e.Position},
					Detail: fmt.Sprintf("%s after %s", e.Kind, from)})
			}
			st.LastSeq, st.Status = e.Seq, e.Kind
			if e.Kind == Requested {
				st.Mission = e.Seq
			}
		}
		r.States[p] = st
	}

	// Notifications: exactly one per logical event.
	notified := map[identity][]int64{}
	for _, n := range notes {
		id, ok := idOf[n.EventID]
		if !ok {
			add(Violation{Check: "orphan_notification", EventID: n.EventID, Positions: []int64{n.Position}, Detail: "notification for an event not in the ledger"})
			continue
		}
		notified[id] = append(notified[id], n.Position)
	}
	for _, row := range firsts {
		id := identity{row.Patient, row.Seq, row.Kind}
		switch ps := notified[id]; {
		case len(ps) == 0:
			add(Violation{Check: "missing_notification", Patient: row.Patient, Seq: row.Seq, Kind: row.Kind, EventID: row.EventID,
				Positions: []int64{row.Position}, Detail: "no notification sent"})
		case len(ps) > 1:
			add(Violation{Check: "duplicate_notification", Patient: row.Patient, Seq: row.Seq, Kind: row.Kind, EventID: row.EventID,
				Positions: ps, Detail: fmt.Sprintf("%s notified %d times", row.Kind, len(ps))})
		}
	}
	return r
}

// Replay derives every patient's current state from the ledger rows.
func Replay(rows []Row) map[string]PatientState {
	return Validate(rows, nil).States
}

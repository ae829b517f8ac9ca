package enginetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport/memtransport"
)

// Notes is the state of the notes saga: the texts it was sent, in order.
type Notes struct {
	Texts []string `json:"texts"`
}

// Note appends Text to the notes saga Key.
type Note struct {
	Key  string `json:"key"`
	Text string `json:"text"`
}

// NotesType is the notes saga's type.
const NotesType = "notes"

// NotesMachine builds the notes saga: every Note appends its text to the
// state, so a hostile text reaches the store's state document.
func NotesMachine() *saga.Machine[Notes] {
	m := saga.New[Notes](NotesType)
	open := m.State("Open")
	note := saga.NewEvent[Note](m, func(e Note) string { return e.Key })
	add := func(c *saga.Context[Notes], e Note) error {
		c.Data.Texts = append(c.Data.Texts, e.Text)
		return nil
	}
	m.Initially(saga.When(note).Then(add).TransitionTo(open))
	m.During(open, saga.When(note).Then(add))
	return m
}

// HostileCase is one envelope the engine must dead-letter with Reason.
type HostileCase struct {
	Name   string
	Env    idem.Envelope
	Reason string
}

// HostileEnvelopes returns envelopes whose metadata no store or transport
// can be trusted with: U+0000, invalid UTF-8 and control characters in
// every field. Each carries a valid Note for its own key.
func HostileEnvelopes() []HostileCase {
	noteType := saga.MessageType(Note{})
	mk := func(i int, edit func(*idem.Envelope)) idem.Envelope {
		body, _ := json.Marshal(Note{Key: fmt.Sprintf("hostile-%d", i), Text: "ok"})
		env := idem.Envelope{ID: fmt.Sprintf("hostile-%d", i), Type: noteType, Body: body, SentAt: time.Unix(1e9, 0).UTC()}
		edit(&env)
		return env
	}
	cases := []struct {
		name   string
		reason string
		edit   func(*idem.Envelope)
	}{
		{"NUL in ID", idem.ReasonInvalidID, func(e *idem.Envelope) { e.ID += "\x00x" }},
		{"invalid UTF-8 in ID", idem.ReasonInvalidID, func(e *idem.Envelope) { e.ID += "\xff" }},
		{"newline in ID", idem.ReasonInvalidID, func(e *idem.Envelope) { e.ID += "\n" }},
		{"NUL in idempotency key", idem.ReasonInvalidIdempotencyKey, func(e *idem.Envelope) { e.IdempotencyKey = "k\x00" }},
		{"invalid UTF-8 in idempotency key", idem.ReasonInvalidIdempotencyKey, func(e *idem.Envelope) { e.IdempotencyKey = "k\xc3" }},
		{"NUL in type", idem.ReasonInvalidType, func(e *idem.Envelope) { e.Type += "\x00" }},
		{"invalid UTF-8 in type", idem.ReasonInvalidType, func(e *idem.Envelope) { e.Type += "\xfe" }},
		{"NUL in correlation ID", idem.ReasonInvalidCorrelationID, func(e *idem.Envelope) { e.CorrelationID = "a\x00b" }},
		{"invalid UTF-8 in correlation ID", idem.ReasonInvalidCorrelationID, func(e *idem.Envelope) { e.CorrelationID = "a\xffb" }},
		{"NUL in causation ID", idem.ReasonInvalidCausationID, func(e *idem.Envelope) { e.CausationID = "\x00" }},
		{"NUL in traceparent", idem.ReasonInvalidHeader, func(e *idem.Envelope) {
			e.Headers = map[string]string{"traceparent": "00-\x00-01"}
		}},
		{"invalid UTF-8 in a header value", idem.ReasonInvalidHeader, func(e *idem.Envelope) { e.Headers = map[string]string{"x-h": "\xff"} }},
		{"invalid UTF-8 in a header name", idem.ReasonInvalidHeader, func(e *idem.Envelope) { e.Headers = map[string]string{"x-\xff": "v"} }},
		{"NUL in a header name", idem.ReasonInvalidHeader, func(e *idem.Envelope) { e.Headers = map[string]string{"x-\x00": "v"} }},
		{"NUL in the saga key", idem.ReasonInvalidKey, func(e *idem.Envelope) {
			e.Body, _ = json.Marshal(Note{Key: "a\x00b", Text: "ok"})
		}},
	}
	out := make([]HostileCase, len(cases))
	for i, c := range cases {
		out[i] = HostileCase{Name: c.name, Env: mk(i, c.edit), Reason: c.reason}
	}
	return out
}

// HostileInput runs an engine with the notes saga on a store from
// newStore and an in-memory transport, and delivers every HostileEnvelopes
// case twice in one batch, plus a Note whose text holds U+0000 (a state
// document some stores cannot keep) and ordinary Notes. It checks that
// every hostile case ends as exactly one dead letter with its reason and
// its body, that the U+0000 text is either stored exactly or dead-lettered
// with invalid_state, that the ordinary Notes are applied, and that
// nothing is left to retry.
func HostileInput(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	ctx := context.Background()
	st := newStore(t)
	tr := memtransport.New(nil)
	t.Cleanup(func() { _ = tr.Close() })
	e, err := idem.NewEngine(st, tr, &idem.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), BatchSize: 64, Lanes: 1,
		RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond, MaxAttempts: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(NotesMachine()); err != nil {
		t.Fatal(err)
	}
	cases := HostileEnvelopes()
	var envs []idem.Envelope
	for _, c := range cases {
		envs = append(envs, c.Env, c.Env.Clone())
	}
	nul := Note{Key: "state-with-nul", Text: "a\x00b"}
	for i, n := range []Note{{Key: "plain", Text: "<script>alert(1)</script>"}, nul, {Key: "plain", Text: "second"}} {
		env, err := e.NewEnvelope(fmt.Sprintf("note-%d", i), n)
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
	}
	// Straight to the transport: Engine.Publish would refuse the cases.
	if err := tr.Publish(ctx, envs); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := e.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})

	// Settled: every case dead-lettered, the plain saga has both notes, and
	// the U+0000 note applied or dead-lettered.
	var dls []store.DeadLetter
	WaitFor(t, 30*time.Second, "every hostile message to settle", func() (bool, error) {
		dls, err = st.ListDeadLetters(ctx, &store.ListParams{Limit: 1000})
		if err != nil {
			return false, err
		}
		plain, err := loadNotes(ctx, st, "plain")
		if err != nil || len(plain) < 2 {
			return false, err
		}
		withNul, err := loadNotes(ctx, st, nul.Key)
		if err != nil {
			return false, err
		}
		return len(dls) >= len(cases) && (withNul != nil || len(dls) > len(cases)), nil
	})
	byReason := map[string][]store.DeadLetter{}
	for _, d := range dls {
		byReason[d.Reason] = append(byReason[d.Reason], d)
	}
	for _, c := range cases {
		i := slices.IndexFunc(byReason[c.Reason], func(d store.DeadLetter) bool { return bytes.Equal(d.Envelope.Body, c.Env.Body) })
		if i < 0 {
			t.Errorf("%s: no dead letter with reason %s and its body; dead letters by reason: %v", c.Name, c.Reason, reasons(dls))
			continue
		}
		d := byReason[c.Reason][i]
		got, err := st.GetDeadLetter(ctx, d.ID)
		if err != nil {
			t.Errorf("%s: GetDeadLetter(%q): %v", c.Name, d.ID, err)
		} else if got.Error == "" || got.Attempts != 1 {
			t.Errorf("%s: dead letter error %q attempts %d, want an error and 1 attempt", c.Name, got.Error, got.Attempts)
		}
	}
	if len(dls) > len(cases)+1 {
		t.Errorf("%d dead letters for %d cases (each delivered twice) and one state with U+0000: %v", len(dls), len(cases), reasons(dls))
	}
	withNul, err := loadNotes(ctx, st, nul.Key)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case withNul != nil && !slices.Equal(withNul, []string{nul.Text}):
		t.Errorf("state with U+0000: stored %q, want %q exactly", withNul, nul.Text)
	case withNul == nil && len(byReason[idem.ReasonInvalidState]) != 1:
		t.Errorf("state with U+0000: neither stored nor dead-lettered with invalid_state: %v", reasons(dls))
	}
	if plain, _ := loadNotes(ctx, st, "plain"); !slices.Equal(plain, []string{"<script>alert(1)</script>", "second"}) {
		t.Errorf("plain saga: %q, want both notes in order", plain)
	}
	if s := e.Stats(); s.Retries != 0 {
		t.Errorf("%d retries: hostile input must be dead-lettered, not retried", s.Retries)
	}
}

func loadNotes(ctx context.Context, st store.Store, key string) ([]string, error) {
	uow, err := st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = uow.Rollback(ctx) }()
	k := store.Key{SagaType: NotesType, Key: key}
	r, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}})
	if err != nil {
		return nil, err
	}
	in := r.Instances[k]
	if in == nil {
		return nil, nil
	}
	var n Notes
	if err := json.Unmarshal(in.Data, &n); err != nil {
		return nil, errors.Join(fmt.Errorf("decode notes of %s", key), err)
	}
	return n.Texts, nil
}

func reasons(dls []store.DeadLetter) []string {
	out := make([]string, len(dls))
	for i, d := range dls {
		out[i] = d.Reason
	}
	return out
}

package idem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/sagatest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

const stripIDHeader = "x-test-strip-id"

// TestBadInputIsDeadLettered feeds one bad envelope per case and checks that
// it is dead-lettered once, with the expected reason, the envelope kept, and
// no saga created.
func TestBadInputIsDeadLettered(t *testing.T) {
	t.Parallel()
	const maxBody, maxKey = 512, 16
	raw := func(typ, body string) idem.Envelope {
		return idem.Envelope{ID: "bad-1", Type: typ, Body: []byte(body)}
	}
	encode := func(msg any) idem.Envelope {
		env, err := idem.NewEnvelope("bad-1", msg)
		if err != nil {
			t.Fatalf("NewEnvelope: %v", err)
		}
		return env
	}
	for _, tc := range []struct {
		name   string
		env    idem.Envelope
		reason string
	}{
		{"missing ID", func() idem.Envelope {
			e := encode(Inc{Key: "k", N: 1})
			e.Headers = map[string]string{stripIDHeader: "1"}
			return e
		}(), idem.ReasonMissingID},
		{"unknown type", raw("nope.Unknown", `{"key":"k"}`), idem.ReasonUnknownType},
		{"oversized body", raw(incType, `{"key":"k","n":1,"pad":"`+strings.Repeat("x", maxBody)+`"}`), idem.ReasonOversized},
		{"malformed JSON", raw(incType, `{"key":`), idem.ReasonMalformed},
		{"wrong JSON type", raw(incType, `{"key":"k","n":"one"}`), idem.ReasonMalformed},
		{"Validate fails", encode(Inc{Key: "k", N: -1}), idem.ReasonMalformed},
		{"empty key", encode(Inc{Key: "", N: 1}), idem.ReasonInvalidKey},
		{"whitespace-only key", encode(Inc{Key: " \t\n\u00a0 ", N: 1}), idem.ReasonInvalidKey},
		{"control character in key", encode(Inc{Key: "a\x07b", N: 1}), idem.ReasonInvalidKey},
		{"NUL in key", encode(Inc{Key: "a\x00b", N: 1}), idem.ReasonInvalidKey},
		{"invalid UTF-8 in key", raw(incType, "{\"key\":\"a\xffb\",\"n\":1}"), idem.ReasonInvalidKey},
		{"over-long key", encode(Inc{Key: strings.Repeat("k", maxKey+1), N: 1}), idem.ReasonInvalidKey},
		{"over-long key after NFC", encode(Inc{Key: strings.Repeat("e\u0301", maxKey/2) + "x", N: 1}), idem.ReasonInvalidKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{cfg: idem.Config{MaxBodyBytes: maxBody, MaxKeyLen: maxKey}})
			b.rec.setAlter(func(d *transport.Delivery) {
				if d.Envelope.Headers[stripIDHeader] != "" {
					d.Envelope.ID = ""
				}
			})
			b.publish(tc.env)
			b.settle()
			b.stop()

			dls := b.deadLetters()
			if len(dls) != 1 {
				t.Fatalf("got %d dead letters %+v, want 1", len(dls), dls)
			}
			dl := dls[0]
			if dl.Reason != tc.reason {
				t.Errorf("got reason %q (error %q), want %q", dl.Reason, dl.Error, tc.reason)
			}
			if dl.Error == "" {
				t.Error("dead letter has no error text")
			}
			if dl.Attempts != 1 {
				t.Errorf("got attempts %d, want 1", dl.Attempts)
			}
			wantID := tc.env.ID
			if tc.reason == idem.ReasonMissingID {
				wantID = ""
			}
			if dl.Envelope.ID != wantID || dl.Envelope.Type != tc.env.Type || !bytes.Equal(dl.Envelope.Body, tc.env.Body) {
				t.Errorf("dead letter envelope (id %q, type %q, body %q), want the delivered one (id %q, type %q, body %q)",
					dl.Envelope.ID, dl.Envelope.Type, dl.Envelope.Body, wantID, tc.env.Type, tc.env.Body)
			}
			if dl.ID == "" {
				t.Error("dead letter has no ID")
			}
			if ins := b.instances(); len(ins) != 0 {
				t.Errorf("got %d sagas, want none: %+v", len(ins), ins[0])
			}
			if s := b.stats(); s.DeadLettered != 1 || s.Applied != 0 || s.Retries != 0 {
				t.Errorf("stats %+v: want DeadLettered 1, Applied 0, Retries 0", s)
			}
		})
	}
}

// The limits are inclusive: a key of exactly MaxKeyLen bytes and a body of
// exactly MaxBodyBytes are accepted.
func TestLimitsAreInclusive(t *testing.T) {
	t.Parallel()
	key := strings.Repeat("k", 16)
	body, err := json.Marshal(Inc{Key: key, N: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Padded with white space to 64 bytes: the limit also bounds what the
	// counter emits (42 bytes here).
	body = append(body, bytes.Repeat([]byte(" "), 64-len(body))...)
	b := setup(t, &options{cfg: idem.Config{MaxKeyLen: 16, MaxBodyBytes: len(body)}})
	b.publish(idem.Envelope{ID: "m-1", Type: incType, Body: body})
	b.settle()
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Fatalf("got dead letters %+v, want none", dls)
	}
	if c, _ := b.counter(key); c.Total != 3 {
		t.Fatalf("got total %d, want 3", c.Total)
	}
}

// The same key in NFC, NFD and with surrounding white space reaches one
// saga; the journal keeps the raw form.
func TestKeyCanonicalizationOneSaga(t *testing.T) {
	t.Parallel()
	h := sagatest.New(t, newCounter(nil), nil)
	nfc, nfd := "Caf\u00e9", "Cafe\u0301"
	h.Deliver("m-1", Inc{Key: nfc, N: 1})
	h.Deliver("m-2", Inc{Key: nfd, N: 2})
	h.Deliver("m-3", Inc{Key: "  " + nfd + "\t", N: 4})
	h.Settle()
	h.AssertDeadLetters()
	_, data, ok := h.State(nfc)
	if !ok {
		t.Fatalf("no saga for the NFC key %q", nfc)
	}
	if data.Total != 7 || data.Incs != 3 {
		t.Errorf("got total %d after %d incs, want 7 after 3", data.Total, data.Incs)
	}
	ins, err := h.Store.ListInstances(context.Background(), &store.ListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 1 {
		keys := make([]string, len(ins))
		for i, in := range ins {
			keys[i] = in.Key
		}
		t.Fatalf("got %d sagas %q, want 1", len(ins), keys)
	}
	j, err := h.Store.Journal(context.Background(), store.Key{SagaType: counterType, Key: nfc})
	if err != nil {
		t.Fatal(err)
	}
	raws := map[string]bool{}
	for _, e := range j {
		raws[e.RawKey] = true
	}
	if !raws[nfd] || !raws[nfc] {
		t.Errorf("journal raw keys %v: want both the NFC and the NFD form", raws)
	}
}

// An event that cannot start a saga, for a key without one, is ignored and
// counted by default.
func TestNotFoundIgnoredByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.send("close-ghost", Close{Key: "ghost"})
	b.settle()
	b.stop()
	if s := b.stats(); s.NotFound != 1 || s.DeadLettered != 0 || s.Applied != 0 {
		t.Errorf("stats %+v: want NotFound 1, DeadLettered 0, Applied 0", s)
	}
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Errorf("got dead letters %+v, want none", dls)
	}
	if in := b.instance("ghost"); in != nil {
		t.Errorf("got saga %+v, want none", in)
	}
}

// With OnNotFound(NotFoundDeadLetter) the same event is dead-lettered.
func TestNotFoundDeadLetterPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{machine: newCounter(&counterOpts{notFoundDeadLetter: true})})
	env := b.env("close-ghost", Close{Key: "ghost"})
	b.publish(env)
	b.settle()
	b.stop()
	dls := b.deadLetters()
	if len(dls) != 1 || dls[0].Reason != idem.ReasonNotFound {
		t.Fatalf("got dead letters %+v, want one with reason %s", dls, idem.ReasonNotFound)
	}
	if dls[0].Envelope.ID != env.ID || dls[0].SagaType != counterType || dls[0].Key != "ghost" {
		t.Errorf("dead letter %+v: want envelope %s, saga counter/ghost", dls[0], env.ID)
	}
	if s := b.stats(); s.NotFound != 0 || s.DeadLettered != 1 {
		t.Errorf("stats %+v: want NotFound 0, DeadLettered 1", s)
	}
}

// An event the current state neither handles nor ignores is dead-lettered
// as unhandled and leaves the saga as it was.
func TestUnhandledEventDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.send("inc-1", Inc{Key: "k", N: 1})
	b.settle()
	b.send("poke-1", Poke{Key: "k"})
	b.settle()
	dls := b.deadLetters()
	if len(dls) != 1 || dls[0].Reason != idem.ReasonUnhandled || dls[0].Envelope.ID != "poke-1" {
		t.Fatalf("got dead letters %+v, want poke-1 with reason %s", dls, idem.ReasonUnhandled)
	}
	c, in := b.counter("k")
	if c.Total != 1 || in.State != "Open" || in.Version != 1 {
		t.Errorf("saga %s v%d total %d: want Open v1 total 1", in.State, in.Version, c.Total)
	}
}

func putInstance(t *testing.T, st store.Store, in *store.Instance) {
	t.Helper()
	ctx := context.Background()
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &store.Changes{Inserts: []*store.Instance{in}}); err != nil {
		t.Fatalf("insert %s/%s: %v", in.SagaType, in.Key, err)
	}
}

// A state document stored at an older schema version is upgraded on load,
// and saved at the machine's version.
func TestSchemaUpgradedOnLoad(t *testing.T) {
	t.Parallel()
	m := newCounter(&counterOpts{upgrade: true})
	if m.SchemaVersion() != 2 {
		t.Fatalf("machine schema version %d, want 2", m.SchemaVersion())
	}
	b := setup(t, &options{machine: m, noStart: true})
	putInstance(t, b.mstore, &store.Instance{
		SagaType: counterType, Key: "old", State: "Open", Data: []byte(`{"count":5}`),
		SchemaVersion: 1, Version: 1, CreatedAt: epoch, UpdatedAt: epoch,
	})
	b.start()
	b.send("inc-1", Inc{Key: "old", N: 1})
	b.settle()
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Fatalf("got dead letters %+v, want none", dls)
	}
	c, in := b.counter("old")
	if c.Total != 6 {
		t.Errorf("got total %d, want 5 (upgraded) + 1", c.Total)
	}
	if in.SchemaVersion != 2 || in.Version != 2 {
		t.Errorf("got schema version %d, version %d; want 2, 2", in.SchemaVersion, in.Version)
	}
}

// A stored document newer than the machine is not touched: another
// definition wrote it, so the message is given back for a replica that
// knows it, and dead-lettered with reason unknown_state once MaxAttempts
// deliveries found none.
func TestSchemaNewerThanMachine(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{noStart: true})
	data := []byte(`{"total":5,"future":true}`)
	putInstance(t, b.mstore, &store.Instance{
		SagaType: counterType, Key: "new", State: "Open", Data: data,
		SchemaVersion: 3, Version: 1, CreatedAt: epoch, UpdatedAt: epoch,
	})
	b.start()
	b.send("inc-1", Inc{Key: "new", N: 1})
	b.settle()
	dls := b.deadLetters()
	if len(dls) != 1 || dls[0].Reason != idem.ReasonUnknownState || dls[0].Envelope.ID != "inc-1" || dls[0].Attempts != 10 {
		t.Fatalf("got dead letters %+v, want inc-1 with reason %s after 10 attempts", dls, idem.ReasonUnknownState)
	}
	in := b.instance("new")
	if in.Version != 1 || in.SchemaVersion != 3 || !bytes.Equal(in.Data, data) {
		t.Errorf("stored instance changed: v%d schema %d data %s", in.Version, in.SchemaVersion, in.Data)
	}
}

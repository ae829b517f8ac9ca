package sqlq

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	in := transport.Envelope{ID: "m-1", Type: "t", CorrelationID: "k", Headers: map[string]string{"a": "b"},
		SentAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600)), Body: []byte{0, 1, 0xff}}
	meta, body, err := EncodeEnvelope(in)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains([]byte(meta), []byte(`"body":"`)) {
		t.Errorf("metadata %s carries the body", meta)
	}
	out, err := DecodeEnvelope([]byte(meta), body)
	if err != nil {
		t.Fatal(err)
	}
	if out.ID != in.ID || out.Headers["a"] != "b" || !bytes.Equal(out.Body, in.Body) || !out.SentAt.Equal(in.SentAt) || out.SentAt.Location() != time.UTC {
		t.Errorf("got %+v, want %+v with SentAt in UTC", out, in)
	}
}

func TestTokens(t *testing.T) {
	tok := FormatToken(42, NewToken())
	seq, rest, ok := ParseToken(tok)
	if !ok || seq != 42 || rest == "" {
		t.Fatalf("ParseToken(%q) = %d, %q, %v", tok, seq, rest, ok)
	}
	for _, bad := range []string{"", "42", "x:abc", "42:"} {
		if _, _, ok := ParseToken(bad); ok {
			t.Errorf("ParseToken(%q) accepted", bad)
		}
	}
	if _, _, err := SplitTokens([]transport.Delivery{{Token: "nope"}}); err == nil {
		t.Error("SplitTokens accepted a foreign token")
	}
}

func TestCursors(t *testing.T) {
	if typ, key, err := InstanceCursor(&store.ListParams{After: "order\x00o-1"}); err != nil || typ != "order" || key != "o-1" {
		t.Errorf("full cursor: %q %q %v", typ, key, err)
	}
	if typ, key, err := InstanceCursor(&store.ListParams{SagaType: "order", After: "o-1"}); err != nil || typ != "order" || key != "o-1" {
		t.Errorf("key cursor: %q %q %v", typ, key, err)
	}
	if _, _, err := InstanceCursor(&store.ListParams{After: "o-1"}); err == nil {
		t.Error("key cursor without saga type accepted")
	}
	due := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d, typ, key, name, err := TimerCursor(due.Format(time.RFC3339Nano) + "\x00order\x00o-1\x00expire")
	if err != nil || !d.Equal(due) || typ != "order" || key != "o-1" || name != "expire" {
		t.Errorf("timer cursor: %v %q %q %q %v", d, typ, key, name, err)
	}
	if _, _, _, _, err := TimerCursor("bad"); err == nil {
		t.Error("bad timer cursor accepted")
	}
	if Limit(0) != DefaultLimit || Limit(7) != 7 {
		t.Error("Limit")
	}
}

func TestWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done, wake := make(chan struct{}), make(chan struct{})
	close(wake)
	if err := Wait(ctx, done, wake, time.Time{}, time.Hour); err != nil {
		t.Errorf("woken: %v, want nil", err)
	}
	if err := Wait(ctx, done, make(chan struct{}), time.Now().Add(-time.Second), time.Hour); err != nil {
		t.Errorf("next visible in the past: %v, want nil after a millisecond", err)
	}
	close(done)
	if err := Wait(ctx, done, make(chan struct{}), time.Time{}, time.Hour); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("closed: %v, want ErrClosed", err)
	}
	cancel()
	if err := Wait(ctx, make(chan struct{}), make(chan struct{}), time.Time{}, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}

// PrepareTx refuses what a store's Publish refuses, and the token header:
// nothing mints a token in the application's transaction, so a consumer
// would drop the message as a duplicate whose token was claimed.
func TestPrepareTxRefuses(t *testing.T) {
	ok := transport.Envelope{ID: "m-1", Type: "t"}
	for name, env := range map[string]transport.Envelope{
		"no ID":        {Type: "t"},
		"no type":      {ID: "m-1"},
		"NUL in ID":    {ID: "m\x001", Type: "t"},
		"token header": {ID: "m-1", Type: "t", Headers: map[string]string{transport.HeaderToken: "1"}},
	} {
		_, err := PrepareTx("test", []transport.Envelope{ok, env}, time.Now())
		var fe *transport.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a *transport.FieldError", name, err)
		}
	}
	out, err := PrepareTx("test", []transport.Envelope{ok}, time.Now())
	if err != nil || len(out) != 1 || out[0].SentAt.IsZero() {
		t.Errorf("PrepareTx of a good envelope: %v, %v; want it back with SentAt set", out, err)
	}
}

func TestLost(t *testing.T) {
	held, plain := HeldPrefix+"abc", "abc"
	for _, c := range []struct {
		cur, tok string
		expired  bool
		want     bool
	}{
		{plain, plain, false, false},
		{plain, plain, true, false}, // a plain claim past its lease still settles
		{held, held, false, false},
		{held, held, true, true}, // a held claim past its lease is lost
		{RetiredPrefix + held, held, true, false},
		{RetiredPrefix + plain, plain, true, false},
		{"other", plain, false, true},
		{HeldPrefix + "other", held, false, true},
	} {
		if got := Lost(c.cur, c.tok, c.expired); got != c.want {
			t.Errorf("Lost(%q, %q, %v): got %v, want %v", c.cur, c.tok, c.expired, got, c.want)
		}
	}
}

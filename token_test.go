package idem_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// plainStore hides memstore's TokenStore methods: a store without tokens.
type plainStore struct{ store.Store }

func TestDedupTokenNeedsTokenStore(t *testing.T) {
	tr := memtransport.New(nil)
	defer tr.Close()
	quiet := slog.New(slog.DiscardHandler)
	_, err := idem.NewEngine(plainStore{memstore.New(nil)}, tr, &idem.Config{Dedup: idem.DedupToken, Logger: quiet})
	if !errors.Is(err, idem.ErrNoTokens) || !strings.Contains(err.Error(), "Config.Dedup") {
		t.Fatalf("NewEngine with DedupToken on a store without tokens: got %v, want ErrNoTokens naming Config.Dedup", err)
	}
	if _, err := idem.NewEngine(memstore.New(nil), tr, &idem.Config{Dedup: 7, Logger: quiet}); err == nil || !strings.Contains(err.Error(), "Config.Dedup") {
		t.Fatalf("NewEngine with Dedup 7: got %v, want an error naming Config.Dedup", err)
	}
	e, err := idem.NewEngine(plainStore{memstore.New(nil)}, tr, &idem.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	env := idem.Envelope{ID: "m-1", Type: "t.Msg", Body: []byte(`{}`)}
	if err := e.PublishWithTokens(context.Background(), env); !errors.Is(err, idem.ErrNoTokens) {
		t.Fatalf("PublishWithTokens on a store without tokens: got %v, want ErrNoTokens", err)
	}
}

// Publish refuses the token header (no token was minted, so the consumer
// would drop the message); PublishWithTokens refuses hostile fields before
// minting anything.
func TestPublishTokenHeaderAndHostileFields(t *testing.T) {
	ctx := context.Background()
	st, tr := memstore.New(nil), memtransport.New(nil)
	defer st.Close()
	defer tr.Close()
	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	forged := idem.Envelope{ID: "m-1", Type: "t.Msg", Body: []byte(`{}`), Headers: map[string]string{transport.HeaderToken: "1"}}
	if err := e.Publish(ctx, forged); !errors.Is(err, idem.ErrInvalidEnvelope) || !strings.Contains(err.Error(), transport.HeaderToken) {
		t.Fatalf("Publish with the token header: got %v, want ErrInvalidEnvelope naming %s", err, transport.HeaderToken)
	}
	for _, bad := range []idem.Envelope{
		{ID: "m\x00nul", Type: "t.Msg", Body: []byte(`{}`)},
		{ID: "m-2", Type: "t.\xffMsg", Body: []byte(`{}`)},
		{ID: "m-3", Type: "<script>alert(1)</script>\x01", Body: []byte(`{}`)},
	} {
		if err := e.PublishWithTokens(ctx, bad); !errors.Is(err, idem.ErrInvalidEnvelope) {
			t.Errorf("PublishWithTokens(%q, %q): got %v, want ErrInvalidEnvelope", bad.ID, bad.Type, err)
		}
	}
	if n, err := st.CountTokens(ctx); err != nil || n != 0 {
		t.Fatalf("tokens after refused publishes: %d (%v), want 0", n, err)
	}
	// The caller's envelope is not modified.
	env := idem.Envelope{ID: "m-4", Type: "t.Msg", Body: []byte(`{}`), Headers: map[string]string{"a": "b"}}
	if err := e.PublishWithTokens(ctx, env); err != nil {
		t.Fatal(err)
	}
	if _, ok := env.Headers[transport.HeaderToken]; ok {
		t.Fatal("PublishWithTokens set the header on the caller's envelope, want a copy")
	}
	if n, _ := st.CountTokens(ctx); n != 1 {
		t.Fatalf("tokens after one publish: %d, want 1", n)
	}
}

func TestParseDedup(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want idem.Dedup
		ok   bool
	}{{"retention", idem.DedupRetention, true}, {"", idem.DedupRetention, true}, {"token", idem.DedupToken, true}, {"tokens", 0, false}} {
		got, err := idem.ParseDedup(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseDedup(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && tc.in != "" && got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
}

package idem

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// A counter's key is the value its Limit.Key computed when a store keeps
// it as text, and otherwise a digest of it, the same for the same value;
// a Key that panics counts the message under keyPanicked.
func TestLimitKeyOfHostileValues(t *testing.T) {
	for _, v := range []string{"acme", "<script>alert(1)</script>", "é"} {
		if got := limitKey(v); got != v {
			t.Errorf("limitKey(%q) = %q, want it unchanged", v, got)
		}
	}
	for _, v := range []string{"a\x00b", "\xff\xfe", strings.Repeat("t", store.MaxLimitName+1)} {
		got := limitKey(v)
		if !strings.HasPrefix(got, "sha256:") || store.ValidateLimitText("Key", got) != nil || got != limitKey(v) {
			t.Errorf("limitKey(%q) = %q, want a stable digest a store keeps", v, got)
		}
	}
	if limitKey("a\x00b") == limitKey("a\x00c") {
		t.Error("two hostile values share a digest")
	}
	a := &admission{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	l := &Limit{Name: "api", Key: func(*Envelope) string { panic("boom") }}
	if got := a.key(l, &transport.Envelope{ID: "m"}); got != keyPanicked {
		t.Errorf("a panicking Key gave %q, want %q", got, keyPanicked)
	}
}

// The covering limits (store.ReceiveParams.Covering) are those without
// Key that every message type the engine consumes falls under: a limit
// on every message, or one whose MessageTypes name them all. A keyed
// limit, or one that leaves a consumed type out, does not cover.
func TestCoveringLimits(t *testing.T) {
	reg := newRegistry(0)
	for _, typ := range []string{"a", "b"} {
		if err := reg.handle(typ, func(context.Context, Envelope) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	a := &admission{byType: map[string][]*Limit{}, decl: map[string]store.Limit{}}
	tenant := func(*Envelope) string { return "t" }
	for _, l := range []Limit{
		{Name: "every", Concurrency: 1},
		{Name: "both", MessageTypes: []string{"a", "b"}, Rate: 1},
		{Name: "only-a", MessageTypes: []string{"a"}, Concurrency: 1},
		{Name: "keyed", Key: tenant, Concurrency: 1},
		{Name: "keyed-both", MessageTypes: []string{"b", "a"}, Key: tenant, Concurrency: 1},
	} {
		if err := a.declare(&l, reg); err != nil {
			t.Fatalf("declare %s: %v", l.Name, err)
		}
	}
	if got, want := a.coveringLimits(reg), []string{"both", "every"}; !slices.Equal(got, want) {
		t.Errorf("covering limits: got %v, want %v", got, want)
	}
}

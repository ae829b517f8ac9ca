package idem

import (
	"io"
	"log/slog"
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

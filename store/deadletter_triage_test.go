package store_test

import (
	"strings"
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

func TestMaskError(t *testing.T) {
	tests := []struct{ in, want string }{
		{`charge order 4711: card declined`, `charge order #: card declined`},
		{`load saga order/ord-42: version 7`, `load saga order/#: version #`},
		{`user 0f8fad5b-d9cb-469f-a165-70867728950e not found`, `user # not found`},
		{`lock 0xDEADbeef held`, `lock # held`},
		{`object deadbeefcafe missing`, `object # missing`},
		{`field "customer name" is empty`, `field "…" is empty`},
		{"path 'a/b c' is gone; can't retry", `path '…' is gone; can't retry`},
		{"first line\nsecond 123", `first line`},
		{"  spaced \t out  ", `spaced out`},
	}
	for _, tt := range tests {
		if got := store.MaskError(tt.in); got != tt.want {
			t.Errorf("MaskError(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestFingerprint(t *testing.T) {
	same := [][2]string{
		{`charge order 4711: card declined`, `charge order 99: card declined`},
		{`saga order/0f8fad5b-d9cb-469f-a165-70867728950e: "x" refused`, `saga order/7c9e6679-7425-40de-944b-e07fc1f90ae7: "yy" refused`},
		{"timeout after 30s\nstack 1", "timeout after 5s\nstack 2"},
	}
	for _, p := range same {
		if a, b := store.Fingerprint("handler_failed", p[0]), store.Fingerprint("handler_failed", p[1]); a != b {
			t.Errorf("Fingerprint of %q and %q: got %s and %s, want one fingerprint", p[0], p[1], a, b)
		}
	}
	differ := [][2]string{
		{`charge order 4711: card declined`, `charge order 4711: card expired`},
		{`no handler for OrderPlaced`, `no handler for OrderShipped`},
	}
	for _, p := range differ {
		if a, b := store.Fingerprint("handler_failed", p[0]), store.Fingerprint("handler_failed", p[1]); a == b {
			t.Errorf("Fingerprint of %q and %q: both %s, want two fingerprints", p[0], p[1], a)
		}
	}
	if a, b := store.Fingerprint("malformed_body", "x"), store.Fingerprint("unknown_type", "x"); a == b {
		t.Errorf("Fingerprint of one error under two reasons: both %s, want two", a)
	}
	fp := store.Fingerprint("r", "e")
	if len(fp) != 16 || strings.Trim(fp, "0123456789abcdef") != "" || fp == store.FingerprintNone {
		t.Errorf("Fingerprint: got %q, want 16 lowercase hex digits", fp)
	}
	if got := store.Fingerprint("r", "e"); got != fp {
		t.Errorf("Fingerprint twice: got %s then %s, want it stable", fp, got)
	}
	// Hostile text fingerprints without panicking, and stably.
	for _, s := range []string{"\x00\xff\xfe", "<script>alert(1)</script>", strings.Repeat("9", 1<<20)} {
		if a, b := store.Fingerprint(s, s), store.Fingerprint(s, s); a != b || len(a) != 16 {
			t.Errorf("Fingerprint of hostile text: got %q and %q, want one 16-digit fingerprint", a, b)
		}
	}
}

func TestParseArchivedFilter(t *testing.T) {
	for in, want := range map[string]readmodel.ArchivedFilter{"": readmodel.ArchivedExclude, "exclude": readmodel.ArchivedExclude, "only": readmodel.ArchivedOnly, "include": readmodel.ArchivedInclude} {
		got, err := readmodel.ParseArchivedFilter(in)
		if err != nil || got != want {
			t.Errorf("ParseArchivedFilter(%q): got %q, %v, want %q, nil", in, got, err, want)
		}
	}
	if _, err := readmodel.ParseArchivedFilter("yes<script>"); err == nil || !strings.Contains(err.Error(), "want exclude, only or include") {
		t.Errorf("ParseArchivedFilter(bad): got %v, want an error naming the values", err)
	}
}

// BenchmarkFingerprint measures what recording a dead letter pays for its
// fingerprint.
func BenchmarkFingerprint(b *testing.B) {
	errText := `idem: apply order/ord-4711 message 0f8fad5b-d9cb-469f-a165-70867728950e: charge "card-42": payment gateway returned 502 after 30s: upstream 10.0.0.7:8443 refused`
	for b.Loop() {
		store.Fingerprint("handler_failed", errText)
	}
}

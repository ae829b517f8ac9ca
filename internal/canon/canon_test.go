package canon

import (
	"errors"
	"strings"
	"testing"
)

func TestKey(t *testing.T) {
	tests := []struct {
		name, raw, want string
		err             error
	}{
		{"plain", "abc", "abc", nil},
		{"trimmed", "  abc\t", "abc", nil},
		{"nfd becomes nfc", "Cafe\u0301", "Caf\u00e9", nil},
		{"nfc unchanged", "Caf\u00e9", "Caf\u00e9", nil},
		{"empty", "", "", ErrEmpty},
		{"blank", " \t ", "", ErrEmpty},
		{"control", "a\x00b", "", ErrControl},
		{"newline inside", "a\nb", "", ErrControl},
		{"del", "a\x7fb", "", ErrControl},
		{"invalid utf8", "a\xffb", "", ErrEncoding},
		{"too long", strings.Repeat("x", 257), "", ErrTooLong},
		{"at limit", strings.Repeat("x", 256), strings.Repeat("x", 256), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Key(tt.raw, 0)
			if !errors.Is(err, tt.err) {
				t.Fatalf("Key(%q) error = %v, want %v", tt.raw, err, tt.err)
			}
			if got != tt.want {
				t.Fatalf("Key(%q) = %q, want %q", tt.raw, got, tt.want)
			}
		})
	}
}

func FuzzKey(f *testing.F) {
	for _, s := range []string{"abc", " a ", "Cafe\u0301", "a\x00", "\xff", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		k, err := Key(raw, 64)
		if err != nil {
			return
		}
		again, err := Key(k, 64)
		if err != nil || again != k {
			t.Fatalf("not idempotent: Key(%q)=%q, Key(%q)=%q, %v", raw, k, k, again, err)
		}
		if k == "" || len(k) > 64 {
			t.Fatalf("accepted %q", k)
		}
	})
}

// PartitionKey maps the NFC and NFD forms of a key to one string, even
// when NFC makes the key longer than its raw form.
func TestPartitionKeyTwins(t *testing.T) {
	for _, pair := range [][2]string{
		{"caf\u00e9", "cafe\u0301"},
		{"\uFB2C", "\u05E9\u05BC\u05C1"}, // NFC of U+FB2C is longer than U+FB2C
		{" k ", "k"},
	} {
		a, b := PartitionKey(pair[0], "id-a"), PartitionKey(pair[1], "id-b")
		if a != b {
			t.Errorf("PartitionKey(%q) = %q, PartitionKey(%q) = %q: want one key", pair[0], a, pair[1], b)
		}
	}
	if got := PartitionKey("", "id"); got != "id" {
		t.Errorf("PartitionKey without a correlation ID = %q, want the ID", got)
	}
}

func TestLookupAndPrefix(t *testing.T) {
	for _, tc := range []struct {
		fn       func(string) string
		in, want string
	}{
		{Lookup, "Mu\u0308ller ", "M\u00fcller"},
		{Lookup, strings.Repeat("a", 4*DefaultMaxLen), strings.Repeat("a", 4*DefaultMaxLen)},
		{Lookup, "a\x00b", "a\x00b"},
		{Lookup, "", ""},
		{Prefix, " Mu\u0308", "M\u00fc"},
		{Prefix, "a ", "a "},
		{Prefix, "a\xff", "a\xff"},
	} {
		if got := tc.fn(tc.in); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

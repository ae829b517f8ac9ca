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

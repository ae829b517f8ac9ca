package transport_test

import (
	"strings"
	"testing"
	"unicode"

	"github.com/idemhq/idem/transport"
)

func TestPublishID(t *testing.T) {
	env := func(h map[string]string) *transport.Envelope {
		return &transport.Envelope{ID: "order-7", Type: "t", Headers: h}
	}
	mark := func(m string) *transport.Envelope {
		return env(map[string]string{transport.HeaderRepublish: m, transport.HeaderActor: "alice"})
	}
	for _, tc := range []struct {
		name string
		env  *transport.Envelope
		want string // "" when only the properties below are checked
	}{
		{"no headers", env(nil), "order-7"},
		{"other headers", env(map[string]string{transport.HeaderActor: "alice"}), "order-7"},
		{"empty mark", mark(""), "order-7"},
		{"mark", mark("replay 1"), ""},
		{"hostile mark", mark("a\r\nNats-Msg-Id: x\x00\xff<script>"), ""},
		{"long mark", mark(strings.Repeat("m", 10000)), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := transport.PublishID(tc.env)
			if tc.want != "" {
				if got != tc.want {
					t.Errorf("PublishID = %q, want %q", got, tc.want)
				}
				return
			}
			const prefix = "order-7 republish "
			if !strings.HasPrefix(got, prefix) || len(got) != len(prefix)+32 {
				t.Errorf("PublishID = %q, want %q and 32 hexadecimal digits", got, prefix)
			}
			if i := strings.IndexFunc(got, func(r rune) bool { return r > unicode.MaxASCII || !unicode.IsPrint(r) }); i >= 0 {
				t.Errorf("PublishID = %q: not printable ASCII at byte %d", got, i)
			}
		})
	}
	a, b := transport.PublishID(mark("a")), transport.PublishID(mark("b"))
	if a == b || a != transport.PublishID(mark("a")) {
		t.Errorf("marks a and b give %q and %q; want them to differ, and each to be stable", a, b)
	}
}

package admin

import "testing"

func TestReadableJSON(t *testing.T) {
	for in, want := range map[string]string{
		`{"r":"cancel \u003cb\u003enow\u003c/b\u003e \u0026 refund"}`: `{"r":"cancel <b>now</b> & refund"}`,
		`"\u0000 \u001f \" \\ \u005c \u0022"`:                         `"\u0000 \u001f \" \\ \u005c \u0022"`,
		`"\ud83d\ude00 \ud83d x \u202e \u00e9"`:                       `"😀 \ud83d x \u202e é"`,
		`{"\u003ck":1,"n":"\\u003c"}`:                                 `{"<k":1,"n":"\\u003c"}`,
	} {
		if got := readableJSON([]byte(in)); got != want {
			t.Errorf("readableJSON(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestNeutraliseBidi(t *testing.T) {
	in := "<td title=\"a\u202eb\" data-x=\"\u202e>\" aria-label=\"\u200f\"><input value=\"k\u202e\">err \u202etxt.exe\u2066</td>\xff"
	want := "<td title=\"a[U+202E]b\" data-x=\"\u202e>\" aria-label=\"[U+200F]\"><input value=\"k\u202e\">err [U+202E]txt.exe[U+2066]</td>\xff"
	if got := string(neutraliseBidi([]byte(in))); got != want {
		t.Errorf("neutraliseBidi(%q) = %q, want %q", in, got, want)
	}
}

// The contents of a textarea (a form sends them back), a script and a
// style are copied as they are; the text after them is neutralised again.
func TestNeutraliseBidiKeepsRawText(t *testing.T) {
	for in, want := range map[string]string{
		"<textarea name=\"body\" title=\"\u200f\">{\"n\":\"\u05e9\u200f\u202b\"}</textarea>\u200f": "<textarea name=\"body\" title=\"[U+200F]\">{\"n\":\"\u05e9\u200f\u202b\"}</textarea>[U+200F]",
		"<TEXTAREA>\u200e<b>\u200e</b></TextArea>\u200e":                                           "<TEXTAREA>\u200e<b>\u200e</b></TextArea>[U+200E]",
		"<script>var s = \"\u202e\";</script><style>p::after{content:\"\u2066\"}</style>\u202e":    "<script>var s = \"\u202e\";</script><style>p::after{content:\"\u2066\"}</style>[U+202E]",
		"<textareas>\u200f</textareas>":                                                            "<textareas>[U+200F]</textareas>",
		"<textarea>\u200f unclosed":                                                                "<textarea>\u200f unclosed",
	} {
		if got := string(neutraliseBidi([]byte(in))); got != want {
			t.Errorf("neutraliseBidi(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHistoryFileName(t *testing.T) {
	for k, want := range map[[2]string]string{
		{"order", "o-1"}:                 "history-order-o-1.json",
		{"a/b", "..\\x\"y\u202e\x00z é"}: "history-a_b-.._x_y____z___.json",
		{"t", string(make([]byte, 300))}: "history-t-" + string(repeat('_', 100)) + ".json",
	} {
		if got := historyFileName(k[0], k[1]); got != want {
			t.Errorf("historyFileName(%q, %q) = %q, want %q", k[0], k[1], got, want)
		}
	}
}

func repeat(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

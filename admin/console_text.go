package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/idemhq/idem/canon"
)

// prettyJSON is b indented, with the \uXXXX escapes of printable
// characters written as the characters (Go's encoder writes <, > and & so;
// the page escapes them as text). b as it is when it is not JSON.
func prettyJSON(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return readableJSON(out.Bytes())
}

// compactJSON is b as prettyJSON writes it, on one line.
func compactJSON(b []byte) string {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return string(b)
	}
	return readableJSON(out.Bytes())
}

// readableJSON rewrites, inside the strings of the valid JSON b, each
// \uXXXX escape (or surrogate pair) of a printable character other than "
// and \ as that character. Escapes of control and format characters stay.
func readableJSON(b []byte) string {
	var out []byte
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\' && i+1 < len(b) && b[i+1] == 'u':
			r, n := unescapeRune(b[i:])
			if n > 0 {
				out = utf8.AppendRune(out, r)
				i += n - 1
				continue
			}
			out = append(out, b[i], b[i+1])
			i++
			continue
		case c == '\\' && i+1 < len(b):
			out = append(out, c, b[i+1])
			i++
			continue
		}
		out = append(out, c)
	}
	return string(out)
}

// unescapeRune reads the \uXXXX escape (or surrogate pair) at the start
// of b: the character and the bytes it takes, or 0 bytes when it should
// stay escaped.
func unescapeRune(b []byte) (rune, int) {
	hex := func(at int) (rune, bool) {
		if len(b) < at+6 || b[at] != '\\' || b[at+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b[at+2:at+6]), 16, 16)
		return rune(v), err == nil
	}
	r, ok := hex(0)
	n := 6
	if !ok {
		return 0, 0
	}
	if utf16.IsSurrogate(r) {
		lo, ok := hex(6)
		if !ok {
			return 0, 0
		}
		if r = utf16.DecodeRune(r, lo); r == utf8.RuneError {
			return 0, 0
		}
		n = 12
	}
	if r == '"' || r == '\\' || !unicode.IsPrint(r) && r != ' ' || unicode.Is(unicode.Cf, r) {
		return 0, 0
	}
	return r, n
}

// bidiControl tells whether r changes the direction of the text around it
// (the embeddings, overrides and isolates, and the marks).
func bidiControl(r rune) bool {
	return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069 || r == 0x200E || r == 0x200F || r == 0x061C
}

// neutraliseBidi writes each bidi control character in the text of the
// rendered page html, and in its title and aria-label attributes, as a
// visible [U+XXXX], so a hostile error cannot show reversed or reorder
// what is around it. Other attributes keep it: it may be part of a value
// a form sends back (a saga key may hold one); so do the contents of a
// textarea (a form sends them back too: an event's body, in Hebrew or
// Arabic, holds marks), a script and a style.
func neutraliseBidi(html []byte) []byte {
	if !bytes.ContainsFunc(html, bidiControl) {
		return html
	}
	out := make([]byte, 0, len(html)+32)
	inTag, shown := false, false // shown: in text, or in a displayed attribute
	var rawEnd []byte            // the end tag of the raw text element whose start tag this is
	for i := 0; i < len(html); {
		r, n := utf8.DecodeRune(html[i:])
		switch {
		case !inTag && r == '<':
			inTag, rawEnd = true, rawTextEnd(html[i+1:])
		case inTag && !shown && r == '>' && rawEnd != nil:
			j := indexFold(html[i+1:], rawEnd)
			if j < 0 {
				j = len(html) - i - 1
			}
			out = append(out, html[i:i+1+j]...) // the tag's end and the element's contents as they are
			inTag, rawEnd = false, nil
			i += 1 + j
			continue
		case inTag && !shown && r == '"':
			shown = bytes.HasSuffix(out, []byte(" title=")) || bytes.HasSuffix(out, []byte(" aria-label="))
			if !shown {
				if j := bytes.IndexByte(html[i+1:], '"'); j >= 0 { // copy the attribute's value as it is
					out = append(out, html[i:i+j+2]...)
					i += j + 2
					continue
				}
			}
		case inTag && shown && r == '"':
			shown = false
		case inTag && !shown && r == '>':
			inTag = false
		case (!inTag || shown) && bidiControl(r):
			out = fmt.Appendf(out, "[U+%04X]", r)
			i += n
			continue
		}
		out = append(out, html[i:i+n]...)
		i += n
	}
	return out
}

// rawTextElements are the elements whose contents neutraliseBidi copies
// as they are.
var rawTextElements = []string{"textarea", "script", "style"}

// rawTextEnd is the end tag ("</textarea") of the raw text element whose
// start tag b (after its '<') begins, or nil when it begins none.
func rawTextEnd(b []byte) []byte {
	for _, name := range rawTextElements {
		if len(b) > len(name) && bytes.EqualFold(b[:len(name)], []byte(name)) && strings.IndexByte(" \t\n\f\r/>", b[len(name)]) >= 0 {
			return []byte("</" + name)
		}
	}
	return nil
}

// indexFold is the index of the first sub in b, ASCII letters matched in
// either case; -1 when there is none.
func indexFold(b, sub []byte) int {
	for i := 0; i+len(sub) <= len(b); i++ {
		j := bytes.IndexByte(b[i:], sub[0])
		if j < 0 || i+j+len(sub) > len(b) {
			return -1
		}
		if i += j; bytes.EqualFold(b[i:i+len(sub)], sub) {
			return i
		}
	}
	return -1
}

// historyFileName names the download of a saga's history after its type
// and key: letters, digits, '.', '-' and '_' kept, every other byte an '_'
// (no quote, slash or control character reaches the header), each part cut
// to 100 bytes.
func historyFileName(sagaType, key string) string {
	part := func(s string) string {
		b := []byte(s[:min(len(s), 100)])
		for i, c := range b {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
				b[i] = '_'
			}
		}
		return string(b)
	}
	return "history-" + part(sagaType) + "-" + part(key) + ".json"
}

// canonKey is canon.Key, with a refusal of U+FFFD (the replacement
// character, which canon refuses with the control characters) said as what
// it is: bytes that were not UTF-8 before something decoded them.
func canonKey(raw string, maxLen int) (string, error) {
	k, err := canon.Key(raw, maxLen)
	if errors.Is(err, canon.ErrControl) && strings.ContainsRune(raw, utf8.RuneError) && !strings.ContainsFunc(raw, unicode.IsControl) {
		return "", fmt.Errorf("key %+q holds U+FFFD, the replacement character, which stands for bytes that were not UTF-8: use the key's own bytes, path-escaped", raw)
	}
	return k, err
}

package helix

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf16"

	"github.com/idemhq/idem/store"
)

// writeJSON writes v as one JSON document (indented when indent is set)
// and a newline, with every character beyond ASCII escaped: the NFC and
// NFD spellings of a sample ID, identical on a terminal, then read
// "S\u00e4mple" and "Sa\u0308mple", and a JSON decoder still reads back
// the exact strings.
func writeJSON(w io.Writer, v any, indent bool) error {
	var b []byte
	var err error
	if indent {
		b, err = json.MarshalIndent(v, "", "  ")
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	if _, err := io.WriteString(w, asciiJSON(string(b))+"\n"); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// asciiJSON escapes every non-ASCII character of an encoded JSON document
// as \uXXXX (a UTF-16 surrogate pair beyond U+FFFF). Outside strings JSON
// is ASCII, so every such character is inside a string, where the escape
// means the same character.
func asciiJSON(doc string) string {
	var b strings.Builder
	b.Grow(len(doc))
	for _, r := range doc {
		switch {
		case r < 0x80:
			b.WriteRune(r)
		case r > 0xFFFF:
			hi, lo := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, hi, lo)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// rawSpelling is the sample ID as a journal entry's message spelled it:
// the store keeps RawKey only when it differs from the canonical key.
func rawSpelling(e store.JournalEntry) string {
	if e.RawKey != "" {
		return e.RawKey
	}
	return e.Key
}

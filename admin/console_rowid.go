package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// rowID is the id of a row of a live table: kind and a short hash of the
// parts that name the item (a dead letter's ID, a timer's type, key and
// name). console.js matches rows by id when it patches a refreshed page,
// so a row stays the element of its item when others sort in before it.
// The hash keeps the id valid and free of user text whatever the parts
// hold (NUL, invalid UTF-8, markup); 64 bits make a collision on one page
// out of reach. Each part is hashed after its length, so no two lists of
// parts hash the same text (("a\x00b") is not ("a", "b")).
func rowID(kind string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(strconv.Itoa(len(p)) + ":" + p))
	}
	return "row-" + kind + "-" + hex.EncodeToString(h.Sum(nil)[:8])
}

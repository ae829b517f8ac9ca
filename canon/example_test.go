package canon_test

import (
	"errors"
	"fmt"

	"github.com/idemhq/idem/canon"
)

// The NFC and NFD spellings of a key, with or without surrounding white
// space, have one canonical form: the key the engine files the saga under.
func ExampleKey() {
	for _, raw := range []string{"caf\u00e9", " cafe\u0301\t"} {
		k, err := canon.Key(raw, 0)
		fmt.Printf("%q %v\n", k, err)
	}
	_, err := canon.Key("a\x00b", 0)
	fmt.Println(errors.Is(err, canon.ErrControl))
	_, err = canon.Key("   ", 0)
	fmt.Println(errors.Is(err, canon.ErrEmpty))
	// Output:
	// "café" <nil>
	// "café" <nil>
	// true
	// true
}

// Lookup turns a key typed into a search box into the form a store holds,
// and leaves a key the engine would refuse as it is (a dead letter keeps
// such a key as it came).
func ExampleLookup() {
	fmt.Printf("%q\n", canon.Lookup(" Mu\u0308ller"))
	fmt.Printf("%q\n", canon.Lookup("bad\x00key"))
	// Output:
	// "Müller"
	// "bad\x00key"
}

// Prefix trims leading white space only: a trailing space may be part of
// the keys the prefix selects.
func ExamplePrefix() {
	fmt.Printf("%q\n", canon.Prefix("  order-1 "))
	// Output: "order-1 "
}

// AttributeValue is the form a saga's attribute value is stored and
// searched in; AttributeName checks a declared name.
func ExampleAttributeValue() {
	v, err := canon.AttributeValue("Gru\u0308ße GmbH")
	fmt.Printf("%q %v\n", v, err)
	_, err = canon.AttributeValue("line\nbreak")
	fmt.Println(errors.Is(err, canon.ErrAttributeValue))
	fmt.Println(canon.AttributeName("supplier.id"))
	fmt.Println(errors.Is(canon.AttributeName("1st"), canon.ErrAttributeName))
	// Output:
	// "Grüße GmbH" <nil>
	// true
	// <nil>
	// true
}

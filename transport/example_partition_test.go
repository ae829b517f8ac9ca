package transport_test

import (
	"fmt"

	"github.com/idemhq/idem/transport"
)

// A transport with 16 partitions routes an envelope to
// PartitionOf(PartitionKey(env), 16): the NFC and NFD spellings of one
// saga key land in one partition.
func ExamplePartitionOf() {
	nfc := &transport.Envelope{ID: "m1", Type: "Upload", CorrelationID: "caf\u00e9"}
	nfd := &transport.Envelope{ID: "m2", Type: "Upload", CorrelationID: " cafe\u0301"}
	fmt.Println(transport.PartitionOf(transport.PartitionKey(nfc), 16))
	fmt.Println(transport.PartitionOf(transport.PartitionKey(nfd), 16))
	// Output:
	// 10
	// 10
}

// PartitionKey is the canonical correlation ID, or the ID without one.
func ExamplePartitionKey() {
	fmt.Printf("%q\n", transport.PartitionKey(&transport.Envelope{ID: "m1", CorrelationID: "  order-7\t"}))
	fmt.Printf("%q\n", transport.PartitionKey(&transport.Envelope{ID: "m2"}))
	// Output:
	// "order-7"
	// "m2"
}

// PartitionHash is PostgreSQL's hashtext(key) & 2147483647, which pgstore
// computes in SQL.
func ExamplePartitionHash() {
	fmt.Println(transport.PartitionHash("key-17"))
	// Output: 455029860
}

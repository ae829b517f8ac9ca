package sqlitestore

import "github.com/idemhq/idem/transport"

var _ transport.Describer = (*Store)(nil)

// Describe implements transport.Describer for the Store as a queue:
// system "sqlite" and the queue table as destination.
func (s *Store) Describe() transport.Description {
	return transport.Description{System: "sqlite", Destination: "idem_queue"}
}

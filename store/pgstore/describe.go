package pgstore

import "github.com/idemhq/idem/transport"

var _ transport.Describer = (*Store)(nil)

// Describe implements transport.Describer for the Store as a queue:
// system "postgresql" and the queue table, qualified by Config.Schema, as
// destination.
func (s *Store) Describe() transport.Description {
	return transport.Description{System: "postgresql", Destination: s.cfg.Schema + ".idem_queue"}
}

// Package engineaccess gives the packages of this module (admin) what an
// engine holds but does not export, so that the engine's API stays the
// user's. The root package fills in its functions when it is initialised.
package engineaccess

import "github.com/idemhq/idem/transport"

// TransportOf is set by package idem: it returns the transport of e, which
// must be a non-nil *idem.Engine.
var TransportOf func(e any) transport.Transport

// Transport returns the transport the engine e runs on, for operators'
// tools that ask it optional questions (transport.PendingCounter for the
// queue depth) or compare it with the store (a store's own queue). e must
// be a non-nil *idem.Engine.
func Transport(e any) transport.Transport { return TransportOf(e) }

// HandledOf is set by package idem: it returns the message types the
// plain handlers of e (Engine.Handle) consume, sorted. e must be a
// non-nil *idem.Engine.
var HandledOf func(e any) []string

// Handled returns the message types the engine e's plain handlers
// consume, sorted: what a deploy check run by an operator's tool counts
// as served besides the machines. e must be a non-nil *idem.Engine.
func Handled(e any) []string { return HandledOf(e) }

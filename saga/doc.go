// Package saga is Idem's state-machine DSL: a saga type is a typed state
// document S plus a Machine of named states and events bound to Go message
// types, in the spirit of MassTransit's state machines.
//
//	m := saga.New[Order]("order")
//	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
//	paid := saga.NewEvent[PaymentReceived](m, func(e PaymentReceived) string { return e.OrderID })
//	awaiting, done := m.State("AwaitingPayment"), m.Final("Done")
//	m.Initially(saga.When(placed).Then(record).TransitionTo(awaiting))
//	m.During(awaiting, saga.When(paid).Then(ship).TransitionTo(done), saga.Ignore(placed))
//
// Handlers mutate the state document and emit messages only through their
// Context; everything is buffered, and the engine commits the new state, the
// emitted messages, the timers and the inbox record in one transaction. The
// package is pure: it performs no I/O and starts no goroutines, so a machine
// can be tested without any engine (see Machine.Apply).
package saga

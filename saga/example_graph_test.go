package saga_test

import (
	"fmt"

	"github.com/idemhq/idem/saga"
)

func ExampleMachine_Graph() {
	type Ticket struct{}
	type Opened struct{ ID string }
	type Resolved struct{ ID string }

	m := saga.New[Ticket]("ticket")
	open, done := m.State("Open"), m.Final("Resolved")
	opened := saga.NewEvent[Opened](m, func(e Opened) string { return e.ID })
	resolved := saga.NewEvent[Resolved](m, func(e Resolved) string { return e.ID })
	m.Initially(saga.When(opened).TransitionTo(open))
	m.During(open, saga.When(opened), saga.When(resolved).TransitionTo(done))

	g := m.Graph()
	for _, s := range g.States {
		fmt.Printf("state %s final=%v\n", s.Name, s.Final)
	}
	for _, e := range g.Edges {
		fmt.Printf("%s -> %s on %s\n", e.From, e.To, e.Label)
	}
	// Output:
	// state Open final=false
	// state Resolved final=true
	// Initial -> Open on Opened
	// Open -> Open on Opened
	// Open -> Resolved on Resolved
}

package saga

// Graph is a machine's states and transitions, the model that Mermaid and
// DOT draw and that the admin console renders as SVG.
type Graph struct {
	// Name is the saga type.
	Name string `json:"name"`
	// States are the declared states in declaration order, without Initial.
	States []GraphState `json:"states"`
	// Edges are the transitions in a stable order: by source state in
	// declaration order (Initial first), then by event declaration order. A
	// handler without a transition is a self-loop; an ignored event is no
	// edge.
	Edges []GraphEdge `json:"edges"`
}

// GraphState is one state of a Graph.
type GraphState struct {
	Name  State `json:"name"`
	Final bool  `json:"final"`
}

// GraphEdge is one transition of a Graph. From is Initial for an event that
// starts a saga.
type GraphEdge struct {
	From State `json:"from"`
	To   State `json:"to"`
	// Event is the message type; Label is its short form without package
	// qualifiers.
	Event string `json:"event"`
	Label string `json:"label"`
}

// Graph returns the machine's states and transitions: Describe().Graph().
func (m *Machine[S]) Graph() Graph { return m.Describe().Graph() }

package saga

import "fmt"

// DecodeData decodes a stored state document into S, first running the
// machine's upgrade functions from schemaVersion (0 means 1) to the
// current version, exactly as Apply does before it runs an event. It is
// for readers of saga state outside a transition: status pages, admin
// tools, tests. Errors wrap ErrSchema; a panic in an upgrade function
// wraps ErrPanic. It is safe for concurrent use.
func (m *Machine[S]) DecodeData(data []byte, schemaVersion int) (s S, err error) {
	defer func() {
		if p := recover(); p != nil {
			var zero S
			s, err = zero, fmt.Errorf("saga %s: %w: %v", m.name, ErrPanic, p)
		}
	}()
	err = m.decodeState(Input{Data: data, SchemaVersion: schemaVersion}, &s)
	return s, err
}

// CheckData reports whether a stored state document decodes into S with
// the machine's upgrade functions from schemaVersion: DecodeData without
// the value. It is what the deploy check's sample runs (package
// deploycheck, `idem deploy check --sample`), and needs no type
// parameter. Errors wrap ErrSchema, or ErrPanic for a panic in an upgrade
// function. It is safe for concurrent use.
func (m *Machine[S]) CheckData(data []byte, schemaVersion int) error {
	_, err := m.DecodeData(data, schemaVersion)
	return err
}

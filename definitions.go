package idem

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/idemhq/idem/store"
)

// describer is what the definitions check needs of a machine: its
// definition's fingerprint and its canonical description (JSON). It
// stands in until idem.Machine describes itself (issue 33); a machine
// that does not implement it is not recorded.
type describer interface {
	DefinitionFingerprint() string
	DefinitionJSON() []byte
}

// definitionsOf returns the definitions of the registered machines that
// describe themselves, in saga type order.
func definitionsOf(reg *registry) []store.Definition {
	var out []store.Definition
	for _, name := range slices.Sorted(maps.Keys(reg.sagas)) {
		if d, ok := reg.sagas[name].(describer); ok {
			out = append(out, store.Definition{SagaType: name, Fingerprint: d.DefinitionFingerprint(), Description: d.DefinitionJSON()})
		}
	}
	return out
}

// checkDefinitions records, when the store keeps definitions
// (store.DefinitionStore), the definition of each registered machine, and
// keeps their fingerprints for the replica's heartbeats. A failure warns:
// the engine runs as before, but tools that compare builds with the store
// do not know this one.
func checkDefinitions(ctx context.Context, su *startup) checkResult {
	defs := definitionsOf(su.reg)
	if su.caps.definitions == nil || len(defs) == 0 {
		return passed()
	}
	if err := su.caps.definitions.RecordDefinitions(ctx, su.cfg.Clock(), defs); err != nil {
		what := "check that the store is reachable and migrated (idem migrate)"
		if errors.Is(err, store.ErrRejected) {
			what = "rename the saga types the store cannot keep"
		}
		return warned(fmt.Sprintf("the saga definitions were not recorded, so deploy checks and the console do not know this build's: %v: %s", err, what))
	}
	su.definitions = make(map[string]string, len(defs))
	for _, d := range defs {
		su.definitions[d.SagaType] = d.Fingerprint
	}
	return passed()
}

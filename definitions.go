package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/idemhq/idem/store"
)

// definitionsOf returns the definitions of the registered machines, in
// saga type order: each one's fingerprint and canonical description.
func definitionsOf(reg *registry) []store.Definition {
	var out []store.Definition
	for _, name := range slices.Sorted(maps.Keys(reg.sagas)) {
		d := reg.sagas[name].Describe()
		desc, err := json.Marshal(d.Canonical())
		if err != nil { // a Description has only strings, ints, bools and slices
			panic(fmt.Sprintf("saga %s: encode description: %v", name, err))
		}
		out = append(out, store.Definition{SagaType: name, Fingerprint: d.Fingerprint(), Description: desc})
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

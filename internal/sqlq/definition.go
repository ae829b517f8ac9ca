package sqlq

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/idemhq/idem/store"
)

// CheckDefinitions refuses, with a store.RejectedError, definitions whose
// saga type or fingerprint the SQL stores cannot keep and link to the
// replicas' heartbeats: invalid UTF-8 (JSON, which holds the replicas'
// definitions, cannot carry it) and, unless nul is allowed, U+0000
// (PostgreSQL's text cannot).
func CheckDefinitions(defs []store.Definition, nul bool) error {
	for _, d := range defs {
		for _, s := range []string{d.SagaType, d.Fingerprint} {
			if !utf8.ValidString(s) || (!nul && strings.ContainsRune(s, 0)) {
				return &store.RejectedError{Field: "definition", Err: fmt.Errorf(
					"definition %q/%q: saga types and fingerprints must be valid UTF-8 without U+0000", d.SagaType, d.Fingerprint)}
			}
		}
	}
	return nil
}

// UniqueDefinitions returns defs without repeats of a saga type and
// fingerprint (the first is kept), so that one statement upserts each row
// once.
func UniqueDefinitions(defs []store.Definition) []store.Definition {
	seen := make(map[[2]string]bool, len(defs))
	out := make([]store.Definition, 0, len(defs))
	for _, d := range defs {
		k := [2]string{d.SagaType, d.Fingerprint}
		if !seen[k] {
			seen[k] = true
			out = append(out, d)
		}
	}
	return out
}

// DefinitionsNeedle is the JSON form of a saga type, which a replica's
// definitions column holds (as a key) when the replica runs that type: a
// store reads only the replicas whose column contains it.
func DefinitionsNeedle(sagaType string) string {
	b, _ := json.Marshal(sagaType) // a string always encodes
	return string(b)
}

// AttachReplicas sets each definition's Replicas to the IDs of the
// replicas (by ID, their definitions column) that run it, in ID order.
func AttachReplicas(defs []store.Definition, replicas map[string]string) error {
	for id, col := range replicas {
		m, err := DecodeReplicaConfig([]byte(col))
		if err != nil {
			return fmt.Errorf("replica %q definitions: %w", id, err)
		}
		for i := range defs {
			if fp, ok := m[defs[i].SagaType]; ok && fp == defs[i].Fingerprint {
				defs[i].Replicas = append(defs[i].Replicas, id)
			}
		}
	}
	for i := range defs {
		slices.Sort(defs[i].Replicas)
	}
	return nil
}

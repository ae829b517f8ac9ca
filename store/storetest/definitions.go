package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

var definitionStore = implements[store.DefinitionStore]("store.DefinitionStore")

// definitionCases are run when the store implements store.DefinitionStore.
var definitionCases = []testCase{
	{"DefinitionsRecord", definitionsOnly(testDefinitionsRecord)},
	{"DefinitionsReRecordKeepsFirstSeen", definitionsOnly(testDefinitionsReRecordKeepsFirstSeen)},
	{"DefinitionsTwoFingerprintsOfOneType", definitionsOnly(testDefinitionsTwoFingerprints)},
	{"DefinitionsReplicasAttached", definitionsOnly(testDefinitionsReplicasAttached)},
	{"DefinitionsHostileStrings", definitionsOnly(testDefinitionsHostileStrings)},
}

// definitions is what both interfaces the cases use offer.
type definitions interface {
	store.DefinitionStore
	store.ReplicaRegistry
}

func definitionsOnly(fn func(t *testing.T, ds definitions)) func(t *testing.T, s store.Store) {
	return func(t *testing.T, s store.Store) { fn(t, s.(definitions)) }
}

func newDefinition(typ, fp string) store.Definition {
	return store.Definition{SagaType: typ, Fingerprint: fp, Description: []byte(`{"saga_type":"` + typ + `","states":["Started","Done"]}`)}
}

func record(t *testing.T, ds store.DefinitionStore, at time.Time, defs ...store.Definition) {
	t.Helper()
	if err := ds.RecordDefinitions(t.Context(), at, defs); err != nil {
		t.Fatalf("record definitions: got error %v, want nil", err)
	}
}

func listDefinitions(t *testing.T, ds store.DefinitionStore, typ string) []store.Definition {
	t.Helper()
	got, err := ds.Definitions(t.Context(), typ)
	if err != nil {
		t.Fatalf("definitions of %q: got error %v, want nil", typ, err)
	}
	return got
}

// checkDefinition compares every field of got with want's.
func checkDefinition(t *testing.T, what string, got, want store.Definition) {
	t.Helper()
	if got.SagaType != want.SagaType || got.Fingerprint != want.Fingerprint || !bytes.Equal(got.Description, want.Description) ||
		!got.FirstSeen.Equal(want.FirstSeen) || !got.LastSeen.Equal(want.LastSeen) || !slices.Equal(got.Replicas, want.Replicas) {
		t.Errorf("%s: got %s, want %s", what, describeDefinition(got), describeDefinition(want))
	}
}

// describeDefinition prints d with its description as text.
func describeDefinition(d store.Definition) string {
	return fmt.Sprintf("{%q %q description %q first seen %s last seen %s replicas %q}",
		d.SagaType, d.Fingerprint, d.Description, d.FirstSeen.Format(time.RFC3339Nano), d.LastSeen.Format(time.RFC3339Nano), d.Replicas)
}

// A recorded definition reads back with its description and first and
// last seen at the time of recording, and only under its own saga type.
func testDefinitionsRecord(t *testing.T, ds definitions) {
	t0 := now()
	order, payment := newDefinition("order", "fp-o"), newDefinition("payment", "fp-p")
	record(t, ds, t0, order, payment)
	want := order
	want.FirstSeen, want.LastSeen = t0, t0
	got := listDefinitions(t, ds, "order")
	if len(got) != 1 {
		t.Fatalf("definitions of order: got %+v, want one", got)
	}
	checkDefinition(t, "order", got[0], want)
	if got := listDefinitions(t, ds, "unknown"); len(got) != 0 {
		t.Errorf("definitions of a type never recorded: got %+v, want none", got)
	}
	if err := ds.RecordDefinitions(t.Context(), t0, nil); err != nil {
		t.Errorf("record no definitions: got error %v, want nil", err)
	}
}

// Recording a known definition again moves its last seen forward only,
// and keeps its first seen and first description; one repeated within a
// call is recorded once.
func testDefinitionsReRecordKeepsFirstSeen(t *testing.T, ds definitions) {
	t0 := now()
	first := newDefinition("order", "fp-1")
	record(t, ds, t0, first)
	again := first
	again.Description = []byte(`{"other":true}`)
	record(t, ds, t0.Add(time.Hour), again, again)
	record(t, ds, t0.Add(time.Minute), again) // an engine whose clock is behind
	want := first
	want.FirstSeen, want.LastSeen = t0, t0.Add(time.Hour)
	got := listDefinitions(t, ds, "order")
	if len(got) != 1 {
		t.Fatalf("definitions of order after three records: got %+v, want one", got)
	}
	checkDefinition(t, "after re-recording", got[0], want)
}

// Two fingerprints of one type are both listed, the first seen first, and
// by fingerprint when first seen together.
func testDefinitionsTwoFingerprints(t *testing.T, ds definitions) {
	t0 := now()
	record(t, ds, t0, newDefinition("order", "fp-b"))
	record(t, ds, t0.Add(time.Minute), newDefinition("order", "fp-z"), newDefinition("order", "fp-a"))
	var fps []string
	for _, d := range listDefinitions(t, ds, "order") {
		fps = append(fps, d.Fingerprint)
	}
	if want := []string{"fp-b", "fp-a", "fp-z"}; !slices.Equal(fps, want) {
		t.Errorf("fingerprints of order: got %q, want %q (first seen first, then by fingerprint)", fps, want)
	}
}

// replicasOf returns the replicas listed on each fingerprint of typ.
func replicasOf(t *testing.T, ds store.DefinitionStore, typ string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, d := range listDefinitions(t, ds, typ) {
		out[d.Fingerprint] = d.Replicas
	}
	return out
}

// A definition lists the replicas whose heartbeats name it, whatever
// else they name; a replica that beats with another fingerprint moves,
// and one whose record goes is no longer listed.
func testDefinitionsReplicasAttached(t *testing.T, ds definitions) {
	t0 := now()
	record(t, ds, t0, newDefinition("order", "fp-a"), newDefinition("order", "fp-b"), newDefinition("payment", "fp-p"))
	beats := map[string]map[string]string{
		"r1": {"order": "fp-a", "payment": "fp-p"},
		"r2": {"order": "fp-b"},
		"r3": {"order": "fp-a"},
		"r4": nil,
		"r5": {"orders": "fp-a"},          // another type
		"r6": {"x": "order", "y": "fp-a"}, // the type's name as a fingerprint
		"r7": {"order": "fp-c"},           // a fingerprint never recorded
	}
	for id, defs := range beats {
		r := newReplica(id, t0)
		r.Definitions = defs
		heartbeat(t, ds, r)
	}
	check := func(what string, want map[string][]string) {
		t.Helper()
		if got := replicasOf(t, ds, "order"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: replicas of order's fingerprints: got %v, want %v", what, got, want)
		}
	}
	check("after the beats", map[string][]string{"fp-a": {"r1", "r3"}, "fp-b": {"r2"}})
	if got := replicasOf(t, ds, "payment"); fmt.Sprint(got) != fmt.Sprint(map[string][]string{"fp-p": {"r1"}}) {
		t.Errorf("replicas of payment's fingerprints: got %v, want fp-p run by r1", got)
	}
	moved := newReplica("r3", t0)
	moved.BeatAt, moved.Definitions = t0.Add(time.Second), map[string]string{"order": "fp-b"}
	heartbeat(t, ds, moved)
	check("after r3 beat with fp-b", map[string][]string{"fp-a": {"r1"}, "fp-b": {"r2", "r3"}})
	if n, err := ds.RemoveReplicas(t.Context(), []store.ReplicaMark{{ID: "r1", BeatAt: t0}}); err != nil || n != 1 {
		t.Fatalf("remove r1: got %d, %v; want 1, nil", n, err)
	}
	check("after r1 was removed", map[string][]string{"fp-a": nil, "fp-b": {"r2", "r3"}})
	if _, err := ds.PruneReplicas(t.Context(), t0.Add(time.Second)); err != nil {
		t.Fatalf("prune: %v", err)
	}
	check("after r2 was pruned", map[string][]string{"fp-a": nil, "fp-b": {"r3"}})
}

// Hostile saga types and fingerprints (markup, U+0000, invalid UTF-8) are
// kept exactly, with their replicas, or refused with ErrRejected; a
// refused call writes none of its definitions, and reading a refused type
// finds none.
func testDefinitionsHostileStrings(t *testing.T, ds definitions) {
	t0 := now()
	for i, s := range []string{"<script>alert(1)</script>", "nul\x00byte", "bad\xffutf8", `quo"te\`} {
		good := newDefinition(fmt.Sprintf("good-%d", i), "fp")
		bad := newDefinition(s, s+"-fp")
		err := ds.RecordDefinitions(t.Context(), t0, []store.Definition{good, bad})
		if err != nil {
			if !errors.Is(err, store.ErrRejected) {
				t.Errorf("record type %q: got error %v, want nil or store.ErrRejected", s, err)
			}
			for _, typ := range []string{s, good.SagaType} {
				if got := listDefinitions(t, ds, typ); len(got) != 0 {
					t.Errorf("after a refused record with type %q: definitions of %q: got %+v, want none", s, typ, got)
				}
			}
			continue
		}
		r := newReplica(fmt.Sprintf("r-%d", i), t0)
		r.Definitions = map[string]string{s: bad.Fingerprint}
		heartbeat(t, ds, r)
		want := bad
		want.FirstSeen, want.LastSeen, want.Replicas = t0, t0, []string{r.ID}
		got := listDefinitions(t, ds, s)
		if len(got) != 1 {
			t.Errorf("definitions of %q: got %+v, want one", s, got)
			continue
		}
		checkDefinition(t, fmt.Sprintf("type %q", s), got[0], want)
	}
}

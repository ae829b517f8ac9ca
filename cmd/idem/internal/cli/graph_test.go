package cli

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/idemhq/idem/saga"
)

// idem graph --format json prints each machine's description with its
// fingerprint, which a reader can recompute from the printed description.
func TestGraphJSON(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "graph", "order", "--format", "json")
	if code != 0 {
		t.Fatalf("graph order --format json: exit %d, stderr %q", code, errOut)
	}
	var got struct {
		Fingerprint string `json:"fingerprint"`
		saga.Description
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	want := machines()["order"].Describe()
	if !reflect.DeepEqual(got.Description, want) {
		t.Errorf("printed description\n%+v\nwant\n%+v", got.Description, want)
	}
	if !strings.HasPrefix(got.Fingerprint, saga.FingerprintVersion+":") || got.Fingerprint != want.Fingerprint() {
		t.Errorf("fingerprint %q, want %q", got.Fingerprint, want.Fingerprint())
	}
	if got.Fingerprint != got.Description.Fingerprint() {
		t.Errorf("the printed description fingerprints as %q, not the printed %q", got.Description.Fingerprint(), got.Fingerprint)
	}

	code, out, errOut = run(t, "graph", "--format", "json")
	if code != 0 {
		t.Fatalf("graph --format json: exit %d, stderr %q", code, errOut)
	}
	var all []struct {
		Fingerprint string `json:"fingerprint"`
		Name        string `json:"name"`
	}
	if err := json.Unmarshal([]byte(out), &all); err != nil {
		t.Fatalf("output is not a JSON array: %v\n%s", err, out)
	}
	if len(all) != 2 || all[0].Name != "order" || all[1].Name != "searchimport" || all[0].Fingerprint != want.Fingerprint() ||
		all[1].Fingerprint != machines()["searchimport"].Describe().Fingerprint() {
		t.Errorf("every machine: %+v, want order and searchimport with their fingerprints", all)
	}
}

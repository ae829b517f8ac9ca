package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// idem sagas show --json prints the journal as GET
// /api/sagas/{type}/{key}/history does: a JSON payload as JSON, not as
// the store's base64.
func TestSagasShowJSONPayloadReadable(t *testing.T) {
	t.Parallel()
	url := seedSQLite(t)
	if code, out, errOut := run(t, "sagas", "end", "order", "a-1", "--reason", "customer <called>", "--store", url); code != 0 {
		t.Fatalf("sagas end: exit %d, out %q, stderr %q", code, out, errOut)
	}
	code, out, errOut := run(t, "sagas", "show", "order", "a-1", "--json", "--store", url)
	var shown struct {
		Journal []struct {
			Payload         json.RawMessage `json:"payload"`
			PayloadEncoding string          `json:"payload_encoding"`
			Actor           string          `json:"actor"`
		} `json:"journal"`
	}
	if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil || len(shown.Journal) != 1 {
		t.Fatalf("sagas show --json: exit %d, %v, out %q, stderr %q; want one journal entry", code, err, out, errOut)
	}
	j := shown.Journal[0]
	var payload map[string]any
	if err := json.Unmarshal(j.Payload, &payload); err != nil || j.PayloadEncoding != "json" {
		t.Fatalf("journal payload %s (encoding %q): want the payload's JSON object, encoding json (%v)", j.Payload, j.PayloadEncoding, err)
	}
	if !strings.Contains(string(j.Payload), "customer") || !strings.HasPrefix(j.Actor, "cli") {
		t.Errorf("journal entry %+v: want the reason in the payload and the CLI as actor", j)
	}
}

package store_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// MigrationEntry keeps the stored document within StateLimit (4096 when
// zero, none when negative), cut at a rune boundary and marked truncated.
func TestMigrationEntryBoundsTheDocument(t *testing.T) {
	at := time.Unix(1, 0).UTC()
	doc := []byte(`{"name":"héé"}`) // é is two bytes: byte 11 is inside the first
	tests := []struct {
		limit     int
		want      string
		truncated bool
	}{
		{0, string(doc), false},
		{-1, "", false},
		{len(doc), string(doc), false},
		{11, `{"name":"h`, true},
		{12, `{"name":"hé`, true},
	}
	for _, tc := range tests {
		p := &store.MigrateStatesParams{SagaType: "order", From: "A", To: "B", Limit: 1, At: at, EventType: "idem.StateMigrated", Actor: "ops", StateLimit: tc.limit}
		e := p.MigrationEntry("k", 7, doc)
		if string(e.State) != tc.want || e.StateTruncated != tc.truncated {
			t.Errorf("StateLimit %d: got state %q truncated %v, want %q %v", tc.limit, e.State, e.StateTruncated, tc.want, tc.truncated)
		}
		if e.MessageID != "idem.migrate/A>B" || e.Version != 7 || e.FromState != "A" || e.ToState != "B" || e.Actor != "ops" || !e.At.Equal(at) {
			t.Errorf("StateLimit %d: got entry %+v, want message idem.migrate/A>B, version 7, A>B by ops at %s", tc.limit, e, at)
		}
	}
}

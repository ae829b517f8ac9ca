package inspect_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// HistoryOf (idem sagas show --json) computes each entry's diff from the
// states the journal recorded, as the history endpoint does.
func TestHistoryOfComputesDiffs(t *testing.T) {
	at := time.Now().UTC()
	j := []store.JournalEntry{
		{SagaType: "order", Key: "o-1", MessageID: "m-1", Version: 1, At: at, JournalDetail: store.JournalDetail{State: []byte(`{"paid":false}`)}},
		{SagaType: "order", Key: "o-1", MessageID: "m-2", Version: 2, At: at, JournalDetail: store.JournalDetail{State: []byte(`{"paid":true}`)}},
	}
	h, err := inspect.HistoryOf(context.Background(), memstore.New(nil), store.Key{SagaType: "order", Key: "o-1"}, j)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Entries) != 2 || string(h.Entries[1].Diff) != `[{"op":"replace","path":"/paid","value":true}]` || string(h.Entries[0].Diff) != `[{"op":"add","path":"/paid","value":false}]` {
		t.Errorf("HistoryOf: entries %+v; want the add of /paid, then its replace", h.Entries)
	}
}

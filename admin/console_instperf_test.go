package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/readmodel"
	"github.com/idemhq/idem/transport/memtransport"
)

// wholeJournals is a memstore that counts the reads of whole journals
// (Store.Journal); its JournalTail is memstore's.
type wholeJournals struct {
	*memstore.Store
	reads atomic.Int64
}

func (s *wholeJournals) Journal(ctx context.Context, k store.Key) ([]store.JournalEntry, error) {
	s.reads.Add(1)
	return s.Store.Journal(ctx, k)
}

// The instance page reads only the journal entries it shows (the latest
// 200, readmodel.JournalTailer) and the journal's length, never the whole
// journal; the history download and the API still return all of it.
func TestInstancePageReadsOnlyTheJournalItShows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &wholeJournals{Store: memstore.New(nil)}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := idem.NewEngine(st, memtransport.New(nil), &idem.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(orders.OrderMachine()); err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(e, st, &admin.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	now := time.Now().UTC()
	in := &store.Instance{SagaType: "order", Key: "o-1", State: "AwaitingPayment", Data: []byte(`{"ID":"o-1"}`), SchemaVersion: 1, Version: 1, CreatedAt: now, UpdatedAt: now}
	js := make([]store.JournalEntry, 0, 250)
	for i := range 250 {
		js = append(js, store.JournalEntry{SagaType: "order", Key: "o-1", MessageID: fmt.Sprintf("bulk-%03d", i), EventType: "bulk.Event",
			FromState: "AwaitingPayment", ToState: "AwaitingPayment", Version: int64(i + 1), At: now,
			JournalDetail: store.JournalDetail{State: fmt.Appendf(nil, `{"n":%d}`, i)}})
	}
	u, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = u.Commit(ctx, &store.Changes{Inserts: []*store.Instance{in}, Journal: js})
	_ = u.Rollback(ctx)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) string {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return string(body)
	}
	page := get("/instances/order/o-1")
	if n := st.reads.Load(); n != 0 {
		t.Errorf("the instance page read the whole journal %d times; want it to read the latest entries only", n)
	}
	if n := strings.Count(page, "message bulk-"); n != 200 {
		t.Errorf("the page shows %d of the 250 entries; want the latest 200", n)
	}
	if !strings.Contains(page, "message bulk-050 ") || strings.Contains(page, "message bulk-049 ") || !strings.Contains(page, "50 earlier entries") {
		t.Errorf("the page does not show bulk-050 to bulk-249 with a note on the 50 earlier ones")
	}
	// Each shown entry has its diff, the oldest shown too: the page reads
	// the entry before it for the state it changed.
	if n := strings.Count(page, `<td class="mono">replace</td>`); n != 200 {
		t.Errorf("the page shows %d diffs; want one for each of the 200 entries shown", n)
	}
	var hist admin.SagaHistory
	if err := json.Unmarshal([]byte(get("/instances/order/o-1/history.json")), &hist); err != nil {
		t.Fatal(err)
	}
	if len(hist.Entries) != 250 || hist.Entries[0].MessageID != "bulk-000" {
		t.Errorf("the download holds %d entries; want all 250, from bulk-000", len(hist.Entries))
	}
	if err := json.Unmarshal([]byte(get("/api/sagas/order/o-1/history")), &hist); err != nil {
		t.Fatal(err)
	}
	if len(hist.Entries) != 250 {
		t.Errorf("the API's history holds %d entries; want all 250", len(hist.Entries))
	}
}

// The overview counts the unresolved dead letters only while the store
// holds fewer than StoredCountBound dead letters in all: above that, an
// exact count of rare unresolved ones means reading every stored one (the
// unresolved filter is no index), so it shows an estimate from at most
// StoredCountBound of them. Here 1,200 are stored, 1,190 of them archived.
func TestOverviewDoesNotCountEveryDeadLetter(t *testing.T) {
	t.Parallel()
	// A store that cannot count its unresolved dead letters from an index
	// (sqlitestore): the field hides memstore's readmodel.UnresolvedCounter.
	st := &struct {
		*memstore.Store
		CountUnresolved struct{}
	}{Store: memstore.New(nil)}
	const stored, unresolved = admin.StoredCountBound + 200, 10
	got := overviewDeadLetters(t, st, stored, func(i int) bool { return i%(stored/unresolved) == 0 })
	if got == nil || got.Accuracy != admin.AccuracyEstimate {
		t.Fatalf("overview: stored dead letters %+v; want an estimate (an exact count of %d unresolved among %d reads them all)", got, unresolved, stored)
	}
	if got.Count < 0 || got.Count > stored {
		t.Errorf("overview: estimated %d unresolved dead letters; want between 0 and the %d stored", got.Count, stored)
	}
}

// overviewDeadLetters stores the given number of dead letters in st,
// archives those that stay is false for, and returns the overview's
// "dead letters stored" tile.
func overviewDeadLetters(t *testing.T, st interface {
	store.Store
	readmodel.DeadLetterArchiver
}, stored int, stay func(i int) bool) *admin.StoredCount {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := idem.NewEngine(st, memtransport.New(nil), &idem.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(e, st, &admin.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	now := time.Now().UTC()
	ds := make([]store.DeadLetter, 0, stored)
	var archive []string
	for i := range stored {
		id := fmt.Sprintf("d-%05d", i)
		env, err := e.NewEnvelope(id, orders.OrderPlaced{OrderID: id})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, store.DeadLetter{ID: id, Envelope: env, Reason: "permanent_error", Error: "no", Attempts: 1, FirstFailedAt: now, LastFailedAt: now})
		if !stay(i) {
			archive = append(archive, id)
		}
	}
	u, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = u.Commit(ctx, &store.Changes{DeadLetters: ds})
	_ = u.Rollback(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := st.ArchiveDeadLetters(ctx, &readmodel.ArchiveParams{IDs: archive, At: now}); err != nil || n != len(archive) {
		t.Fatalf("archive: %d, %v; want %d", n, err, len(archive))
	}
	resp, err := srv.Client().Get(srv.URL + "/api/overview")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ov admin.Overview
	if err := json.NewDecoder(resp.Body).Decode(&ov); err != nil {
		t.Fatal(err)
	}
	return ov.Stored.DeadLetters
}

// The overview counts a readmodel.UnresolvedCounter's unresolved dead letters
// exactly up to the bound, wherever they are among the archived ones (a
// sample of the first by ID would see none of the newest), and says "at
// least" above it.
func TestOverviewCountsUnresolvedFromTheStore(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		unresolved int
		want       admin.StoredCount
	}{
		{10, admin.StoredCount{Count: 10, Accuracy: admin.AccuracyExact}},
		{admin.StoredCountBound + 100, admin.StoredCount{Count: admin.StoredCountBound, Accuracy: admin.AccuracyAtLeast}},
	} {
		stored := admin.StoredCountBound + 200 + c.unresolved
		// The newest, last by ID, stay unresolved.
		got := overviewDeadLetters(t, memstore.New(nil), stored, func(i int) bool { return i >= stored-c.unresolved })
		if got == nil || *got != c.want {
			t.Errorf("%d unresolved among %d: overview says %+v, want %+v", c.unresolved, stored, got, c.want)
		}
	}
}

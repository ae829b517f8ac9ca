package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/readmodel"
	"github.com/idemhq/idem/transport/memtransport"
)

// estimatingStore holds more rows than the overview counts, and estimates.
type estimatingStore struct{ *memstore.Store }

func (estimatingStore) CountRows(_ context.Context, _ string, limit int64) (int64, error) {
	return limit, nil
}

func (estimatingStore) EstimateRows(context.Context) (map[string]int64, error) {
	return map[string]int64{readmodel.TableTimers: 5000, readmodel.TableDeadLetters: 5000}, nil
}

// The "Timers pending" tile's note names the timers' own source, not the
// dead letters' sample.
func TestOverviewTimersTileNote(t *testing.T) {
	t.Parallel()
	st := estimatingStore{memstore.New(nil)}
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
	resp, err := srv.Client().Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`id="stored-timers">[^<]*</div><div class="sub">([^<]*)<`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no Timers pending tile:\n%s", body)
	}
	if note := string(m[1]); strings.Contains(note, "dead letter") || !strings.Contains(note, "estimate") {
		t.Errorf("the Timers pending tile's note is %q: want an estimate that does not mention dead letters", note)
	}
}

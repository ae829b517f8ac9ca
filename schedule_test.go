package idem_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// Schedules on memstore with a broker-like transport: ticks go through the
// outbox committed with the advance, then to the transport.
func TestSchedulesFireOnceThroughOutbox(t *testing.T) {
	tr := memtransport.New(nil)
	t.Cleanup(func() { _ = tr.Close() })
	enginetest.SchedulesFireOnce(t, memstore.New(nil), tr)
}

func TestScheduleRegistrationRefusesBadInput(t *testing.T) {
	e, err := idem.NewEngine(memstore.New(nil), memtransport.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"empty name":     e.Every("", time.Second, enginetest.Beat{}),
		"NUL in name":    e.Every("a\x00b", time.Second, enginetest.Beat{}),
		"invalid UTF-8":  e.Every("a\xffb", time.Second, enginetest.Beat{}),
		"long name":      e.Every(strings.Repeat("n", 201), time.Second, enginetest.Beat{}),
		"tiny interval":  e.Every("tiny", time.Microsecond, enginetest.Beat{}),
		"bad cron":       e.Cron("bad", "61 * * * *", enginetest.Beat{}),
		"script in cron": e.Cron("script", "<script>alert(1)</script>", enginetest.Beat{}),
		"NUL in cron":    e.Cron("nul", "* * * * *\x00", enginetest.Beat{}),
		"30 February":    e.Cron("feb30", "0 0 30 2 *", enginetest.Beat{}),
		"unencodable":    e.Every("chan", time.Second, make(chan int)),
	} {
		if err == nil {
			t.Errorf("%s: registered, want an error", name)
		}
	}
	if err := e.Cron("daily", "30 2 * * *", enginetest.Beat{}); err != nil {
		t.Fatalf("valid cron: %v", err)
	}
	if err := e.Cron("daily", "@hourly", enginetest.Beat{}); err == nil {
		t.Error("second schedule named daily: registered, want an error")
	}
}

func TestTickIDIsDeterministic(t *testing.T) {
	at := time.Date(2026, 1, 1, 2, 30, 0, 0, time.UTC)
	if idem.TickID("daily", at) != idem.TickID("daily", at.In(time.FixedZone("x", 3600))) {
		t.Error("the same instant in another zone gives another ID")
	}
	if idem.TickID("daily", at) == idem.TickID("daily", at.Add(time.Microsecond)) || idem.TickID("daily", at) == idem.TickID("other", at) {
		t.Error("distinct ticks share an ID")
	}
}

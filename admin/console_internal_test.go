package admin

import (
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// TestRatesWindowAfterIdle polls the sampler every 2 s as the overview
// does, stops for two minutes, and polls again: the rates must cover the
// last 10 s at most, not the idle spell.
func TestRatesWindowAfterIdle(t *testing.T) {
	var applied int64
	r := &rateSampler{stats: func() idem.Stats { return idem.Stats{Applied: applied} }}
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for i := 0; i <= 10; i += 2 {
		applied += 20 // 10 a second while polled
		r.rates(t0.Add(time.Duration(i) * time.Second))
	}
	// Idle: nobody polls for 108 s, and nothing is applied.
	got, _ := r.rates(t0.Add(118 * time.Second))
	if got.Window > rateWindow.Seconds() {
		t.Errorf("first poll after 108 s idle: window %.1f s, want at most %v", got.Window, rateWindow)
	}
	if got.Applied != 0 {
		t.Errorf("first poll after idle: %.2f applied/s, want 0 (nothing was applied in the last 10 s)", got.Applied)
	}
	applied += 6
	got, _ = r.rates(t0.Add(120 * time.Second))
	if got.Window != 2 || got.Applied != 3 {
		t.Errorf("poll 2 s later with 6 applied: %.2f/s over %.1f s, want 3/s over 2 s", got.Applied, got.Window)
	}
	for i := 122; i <= 140; i += 2 {
		r.rates(t0.Add(time.Duration(i) * time.Second))
	}
	got, _ = r.rates(t0.Add(142 * time.Second))
	if got.Window != rateWindow.Seconds() {
		t.Errorf("steady polling every 2 s: window %.1f s, want %v", got.Window, rateWindow)
	}
}

// TestDueToTheMinute: a timer due in 1 h 59 m reads so, not "1h", and
// every duration of the console has the same format.
func TestDueToTheMinute(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		at   time.Time
		want string
	}{
		{now.Add(time.Hour + 59*time.Minute + 50*time.Second), "1h 59m from now"},
		{now.Add(-(26*time.Hour + 3*time.Minute + 10*time.Second)), "1d 2h 3m ago"},
		{now.Add(-(12*time.Minute + 5*time.Second)), "12m 5s ago"},
		{now.Add(42 * time.Second), "42s from now"},
		{now.Add(300 * time.Millisecond), "just now"},
		{time.Time{}, "—"},
	} {
		if got := agoAt(tc.at, now); got != tc.want {
			t.Errorf("agoAt(now%+v): %q, want %q", tc.at.Sub(now), got, tc.want)
		}
	}
	if got := seconds(7199.5); got != "1h 59m" {
		t.Errorf("seconds(7199.5): %q, want %q", got, "1h 59m")
	}
	if got := ago(time.Now().Add(time.Hour + 59*time.Minute + 50*time.Second)); got != "1h 59m from now" {
		t.Errorf("due in 1h59m50s: %q, want %q", got, "1h 59m from now")
	}
}

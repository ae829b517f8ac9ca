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

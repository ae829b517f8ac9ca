package backoff

import (
	"testing"
	"time"
)

func TestDelayBoundsAndGrowth(t *testing.T) {
	p := Policy{Base: 10 * time.Millisecond, Max: time.Second}
	for attempt, want := range map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond, 4: 80 * time.Millisecond, 20: time.Second} {
		for range 100 {
			got := p.Delay(attempt)
			if got < want/2 || got > want {
				t.Fatalf("Delay(%d) = %v, want within [%v, %v]", attempt, got, want/2, want)
			}
		}
	}
}

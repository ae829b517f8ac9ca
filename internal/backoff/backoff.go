// Package backoff computes bounded exponential delays with jitter.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy is an exponential backoff: attempt n (1-based) waits about
// Base·2^(n-1), capped at Max, with "equal jitter" (half fixed, half random)
// so that replicas retrying together spread out.
type Policy struct {
	Base, Max time.Duration
}

// Delay returns the delay before retry number attempt (1-based).
func (p Policy) Delay(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := p.Base
	for i := 1; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	if d > p.Max {
		d = p.Max
	}
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

package transport

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strconv"
)

// Fair share and priority (docs/flow-control.md): a queue that receives in
// fair order (store.ReceiveParams.Fair) serves the values of
// HeaderFairnessKey round-robin, weighted by HeaderFairnessWeight, and
// orders each value's messages by HeaderPriority. The headers are set by
// whoever publishes a message; the engine copies them from a message to
// the messages its saga emits, so a tenant's follow-ups stay in its share.
const (
	// HeaderFairnessKey names the share a message belongs to (a tenant,
	// say); absent or empty, the share "". At most MaxFairnessKey bytes:
	// a longer key counts as "md5:" and its MD5 digest in hex.
	HeaderFairnessKey = "idem-fairness-key"
	// HeaderFairnessWeight is the share's weight, a decimal integer from 1
	// to MaxFairnessWeight: a share of weight 3 is served three messages
	// for one of a share of weight 1. A share's weight is the highest its
	// waiting messages carry. Absent: 1.
	HeaderFairnessWeight = "idem-fairness-weight"
	// HeaderPriority is a message's priority within its share, a decimal
	// integer from MinPriority to MaxPriority; higher goes first. Absent:
	// 0.
	HeaderPriority = "idem-priority"
)

// Bounds of the fairness headers.
const (
	MaxFairnessKey    = 200
	MaxFairnessWeight = 1000
	MinPriority       = -100
	MaxPriority       = 100
)

// Fairness is what a message's fairness headers say, as a fair queue
// reads them.
type Fairness struct {
	Key      string
	Weight   int
	Priority int
}

// FairnessOf reads env's fairness headers. It is lenient, as the queues'
// SQL is: a weight or priority that ValidateFairness refuses counts as
// absent (weight 1, priority 0), and a value outside its bounds is
// clamped to them, so that a message nobody checked is still served.
func FairnessOf(env *Envelope) Fairness {
	f := Fairness{Key: env.Headers[HeaderFairnessKey], Weight: 1}
	if len(f.Key) > MaxFairnessKey {
		sum := md5.Sum([]byte(f.Key))
		f.Key = "md5:" + hex.EncodeToString(sum[:])
	}
	if w, ok := decimal(env.Headers[HeaderFairnessWeight], 4, false); ok {
		f.Weight = min(max(w, 1), MaxFairnessWeight)
	}
	if p, ok := decimal(env.Headers[HeaderPriority], 3, true); ok {
		f.Priority = min(max(p, MinPriority), MaxPriority)
	}
	return f
}

// ValidateFairness refuses fairness headers a queue would not read as
// written: a weight that is not a decimal integer from 1 to
// MaxFairnessWeight, a priority that is not one from MinPriority to
// MaxPriority, or a key over MaxFairnessKey bytes. The error is a
// *FieldError naming the header.
func ValidateFairness(env *Envelope) error {
	if k := env.Headers[HeaderFairnessKey]; len(k) > MaxFairnessKey {
		return &FieldError{Field: FieldHeader, Problem: fmt.Sprintf("%s is %d bytes long: at most %d", HeaderFairnessKey, len(k), MaxFairnessKey)}
	}
	if v, ok := env.Headers[HeaderFairnessWeight]; ok {
		if w, ok := decimal(v, 4, false); !ok || w < 1 || w > MaxFairnessWeight {
			return &FieldError{Field: FieldHeader, Problem: fmt.Sprintf("%s %q is not a whole number from 1 to %d", HeaderFairnessWeight, v, MaxFairnessWeight)}
		}
	}
	if v, ok := env.Headers[HeaderPriority]; ok {
		if p, ok := decimal(v, 3, true); !ok || p < MinPriority || p > MaxPriority {
			return &FieldError{Field: FieldHeader, Problem: fmt.Sprintf("%s %q is not a whole number from %d to %d", HeaderPriority, v, MinPriority, MaxPriority)}
		}
	}
	return nil
}

// decimal parses s as 1 to digits ASCII digits, with a leading '-' when
// signed: exactly what the SQL queues' patterns accept (^-?[0-9]{1,n}$).
func decimal(s string, digits int, signed bool) (int, bool) {
	d := s
	if signed && len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > digits {
		return 0, false
	}
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

package admin

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/idemhq/idem/store"
)

// whyAdmission is a message of the saga waiting for admission, as the why
// panel shows it: the counter it waits for and, from the limit's values
// in force, why that counter refuses it.
type whyAdmission struct {
	store.AdmissionWait
	// Reason is "is at its cap", "has no tokens", "is at its cap or has
	// no tokens" (a limit with both), or "" when no values are in force
	// for the limit (its declaration is gone).
	Reason string
}

// admissionWaitsOf reads the messages of saga key waiting for admission,
// with why their counters refuse them; nil when the store records no
// refusal (it is no store.AdmissionWaiter). The store finds them by the
// key alone, which sagas of other types (and plain handlers' messages)
// may share: with types set (the message types of the saga's machine,
// registered here), only messages of those types are kept. The limits in
// force are read only when a message waits.
func (p *parts) admissionWaitsOf(ctx context.Context, key string, types []string) ([]whyAdmission, error) {
	aw := p.caps.admissionWaits
	if aw == nil {
		return nil, nil
	}
	ws, err := aw.AdmissionWaitsOf(ctx, key)
	if types != nil {
		ws = slices.DeleteFunc(ws, func(w store.AdmissionWait) bool { return !slices.Contains(types, w.MessageType) })
	}
	if err != nil || len(ws) == 0 {
		return nil, err
	}
	s := &limitState{declared: map[string]store.Limit{}, override: map[string]store.Limit{}}
	if lim := p.caps.limits; lim != nil {
		if err := s.readValues(ctx, lim); err != nil {
			return nil, err
		}
	}
	out := make([]whyAdmission, len(ws))
	for i, w := range ws {
		out[i] = whyAdmission{AdmissionWait: w}
		if l, ok := s.inForce(w.Limit.Name); ok {
			out[i].Reason = refusalReason(l)
		}
	}
	return out, nil
}

// readValues reads the declarations and the overrides into s.
func (s *limitState) readValues(ctx context.Context, lim store.Limiter) error {
	decl, err := lim.DeclaredLimits(ctx)
	if err != nil {
		return fmt.Errorf("read declared limits: %w", err)
	}
	for _, l := range decl {
		s.declared[l.Name] = l
	}
	over, err := lim.Limits(ctx)
	if err != nil {
		return fmt.Errorf("read limit overrides: %w", err)
	}
	for _, l := range over {
		s.override[l.Name] = l
	}
	return nil
}

// refusalReason says why a counter of a limit with values l refuses a
// message.
func refusalReason(l store.Limit) string {
	switch {
	case l.Concurrency > 0 && l.Rate > 0:
		return "is at its cap or has no tokens"
	case l.Concurrency > 0:
		return "is at its cap"
	case l.Rate > 0:
		return "has no tokens"
	}
	return ""
}

// admissionVerdict is the verdict of a saga with a message waiting for
// admission: the first one's limit, key and reason.
func (p *whyPanel) admissionVerdict() (string, bool) {
	if len(p.Admission) == 0 {
		return "", false
	}
	w := p.Admission[0]
	v := "waiting for admission"
	switch n := len(p.Admission); {
	case n >= store.MaxAdmissionWaitsOf:
		v = strconv.Itoa(n) + " or more messages " + v
	case n > 1:
		v = strconv.Itoa(n) + " messages " + v
	}
	if w.Reason == "" {
		v += " under limit " + strconv.Quote(w.Limit.Name)
		if w.Limit.Key != "" {
			v += " (key " + strconv.Quote(w.Limit.Key) + ")"
		}
		return v, true
	}
	v += ": limit " + strconv.Quote(w.Limit.Name)
	if w.Limit.Key != "" {
		v += " (key " + strconv.Quote(w.Limit.Key) + ")"
	}
	return v + " " + w.Reason, true
}

// Package enginestats adds up the counters of several engines, for the
// harnesses that run replicas (sagatest, the conformance and
// multi-process tests, idem demo).
package enginestats

import (
	"reflect"

	"github.com/idemhq/idem"
)

// Sum returns the counters of es (replicas of one service) added up, field
// by field. Every field of idem.Stats is a counter (TestSumAddsEveryField).
func Sum(es ...*idem.Engine) idem.Stats {
	var sum idem.Stats
	total := reflect.ValueOf(&sum).Elem()
	for _, e := range es {
		s := reflect.ValueOf(e.Stats())
		for i := range total.NumField() {
			total.Field(i).SetInt(total.Field(i).Int() + s.Field(i).Int())
		}
	}
	return sum
}

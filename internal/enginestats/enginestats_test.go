package enginestats

import (
	"reflect"
	"testing"

	"github.com/idemhq/idem"
)

// Sum adds fields by reflection: every field of idem.Stats must be an
// int64 counter, or Sum would panic or drop it.
func TestSumAddsEveryField(t *testing.T) {
	typ := reflect.TypeFor[idem.Stats]()
	for i := range typ.NumField() {
		if f := typ.Field(i); f.Type.Kind() != reflect.Int64 {
			t.Errorf("idem.Stats.%s is a %s; Sum adds int64 counters only", f.Name, f.Type)
		}
	}
	if got := Sum(); got != (idem.Stats{}) {
		t.Errorf("Sum() = %+v, want zero", got)
	}
}

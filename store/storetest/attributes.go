package storetest

import (
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// withAttributes returns a new instance with the given attributes.
func withAttributes(typ, k string, at time.Time, attrs map[string]string) *store.Instance {
	in := newInstance(typ, k, at)
	in.Attributes = attrs
	return in
}

func byAttrs(kv ...string) *readmodel.InstanceQuery {
	p := &readmodel.InstanceQuery{Attributes: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		p.Attributes[kv[i]] = kv[i+1]
	}
	return p
}

func testAttributesStoredInTheSameCommit(t *testing.T, s store.Store) {
	ctx := t.Context()
	base := now()
	// A unit of work that rolls back leaves no searchable trace.
	uow := begin(t, s)
	loadIn(t, uow, &store.LoadParams{Keys: []store.Key{key("order", "o-1")}})
	if err := uow.Rollback(ctx); err != nil {
		t.Fatalf("rollback: got error %v, want nil", err)
	}
	checkStrings(t, "query after an empty rollback", query(t, s, byAttrs("supplier", "acme")), nil)

	in := withAttributes("order", "o-1", base, map[string]string{"supplier": "acme", "region": "eu"})
	commit(t, s, &store.Changes{Inserts: []*store.Instance{in}})
	checkStrings(t, "query supplier=acme after the commit", query(t, s, byAttrs("supplier", "acme")), []string{"order/o-1"})

	got := loadOne(t, s, key("order", "o-1"))
	checkInstance(t, "loaded instance", got, in)
	got.Attributes["supplier"] = "mutated" // a loaded copy is the caller's
	if again := loadOne(t, s, key("order", "o-1")); again.Attributes["supplier"] != "acme" {
		t.Errorf("reload after mutating a loaded copy: supplier %q, want %q", again.Attributes["supplier"], "acme")
	}
	res, err := s.(readmodel.InstanceQuerier).QueryInstances(ctx, byAttrs("region", "eu"))
	if err != nil || len(res) != 1 {
		t.Fatalf("query region=eu: got %d instances, error %v; want 1, nil", len(res), err)
	}
	checkInstance(t, "queried instance", res[0], in)
}

func testAttributesReplacedOnUpdate(t *testing.T, s store.Store) {
	base := now()
	commit(t, s, &store.Changes{Inserts: []*store.Instance{
		withAttributes("order", "o-1", base, map[string]string{"supplier": "acme", "region": "eu"}),
	}})
	update := func(attrs map[string]string) {
		t.Helper()
		in := loadOne(t, s, key("order", "o-1"))
		in.Attributes = attrs
		commit(t, s, &store.Changes{Updates: []*store.Instance{in}})
	}
	update(map[string]string{"supplier": "globex", "region": "eu"})
	checkStrings(t, "old value after change", query(t, s, byAttrs("supplier", "acme")), nil)
	checkStrings(t, "new value after change", query(t, s, byAttrs("supplier", "globex")), []string{"order/o-1"})
	checkStrings(t, "unchanged attribute", query(t, s, byAttrs("region", "eu")), []string{"order/o-1"})

	update(map[string]string{"supplier": "globex"}) // region removed
	checkStrings(t, "removed attribute", query(t, s, byAttrs("region", "eu")), nil)
	checkStrings(t, "kept attribute", query(t, s, byAttrs("supplier", "globex")), []string{"order/o-1"})

	update(nil)
	checkStrings(t, "after every attribute was removed", query(t, s, byAttrs("supplier", "globex")), nil)
	if in := loadOne(t, s, key("order", "o-1")); len(in.Attributes) != 0 {
		t.Errorf("load after removing every attribute: got %v, want none", in.Attributes)
	}
}

func testAttributesFilterAndPaging(t *testing.T, s store.Store) {
	base := now()
	mk := func(typ, k, supplier, region string) *store.Instance {
		return withAttributes(typ, k, base, map[string]string{"supplier": supplier, "region": region})
	}
	commit(t, s, &store.Changes{Inserts: []*store.Instance{
		mk("order", "o-1", "acme", "eu"),
		mk("order", "o-2", "acme", "us"),
		mk("order", "o-3", "globex", "eu"),
		mk("order", "o-4", "acme", "eu"),
		mk("invoice", "i-1", "acme", "eu"),
		newInstance("order", "o-5", base), // no attributes
	}})
	checkStrings(t, "supplier=acme", query(t, s, byAttrs("supplier", "acme")),
		[]string{"invoice/i-1", "order/o-1", "order/o-2", "order/o-4"})
	checkStrings(t, "supplier=acme and region=eu", query(t, s, byAttrs("supplier", "acme", "region", "eu")),
		[]string{"invoice/i-1", "order/o-1", "order/o-4"})
	p := byAttrs("supplier", "acme", "region", "eu")
	p.SagaType = "order"
	checkStrings(t, "type order, supplier=acme and region=eu", query(t, s, p), []string{"order/o-1", "order/o-4"})
	checkStrings(t, "unknown attribute", query(t, s, byAttrs("colour", "acme")), nil)
	checkStrings(t, "a value of another attribute", query(t, s, byAttrs("region", "acme")), nil)

	// Keyset paging with a filter: pages of one, in key order.
	var got []string
	p = byAttrs("supplier", "acme")
	p.Limit = 1
	for range 10 {
		ins, err := s.(readmodel.InstanceQuerier).QueryInstances(t.Context(), p)
		if err != nil {
			t.Fatalf("query page after %v: got error %v, want nil", got, err)
		}
		if len(ins) == 0 {
			break
		}
		got = append(got, instanceKeys(ins)...)
		p.After = readmodel.CursorOf(ins[len(ins)-1])
	}
	checkStrings(t, "pages of supplier=acme", got, []string{"invoice/i-1", "order/o-1", "order/o-2", "order/o-4"})

	stuck := byAttrs("supplier", "acme")
	stuck.Stuck = true
	if n := len(query(t, s, stuck)); n != 4 {
		t.Errorf("stuck with supplier=acme: got %d instances, want 4", n)
	}
}

func testAttributesCompareInNFC(t *testing.T, s store.Store) {
	// The engine stores values in NFC; a query in NFD finds them.
	commit(t, s, &store.Changes{Inserts: []*store.Instance{
		withAttributes("order", "o-1", now(), map[string]string{"supplier": "M\u00fcller"}),
	}})
	checkStrings(t, "NFC query", query(t, s, byAttrs("supplier", "M\u00fcller")), []string{"order/o-1"})
	checkStrings(t, "NFD twin query", query(t, s, byAttrs("supplier", "Mu\u0308ller")), []string{"order/o-1"})
	checkStrings(t, "another value", query(t, s, byAttrs("supplier", "Muller")), nil)
}

func testAttributesHostileQueryMatchesNothing(t *testing.T, s store.Store) {
	hostile := "<script>alert(1)</script> '; DROP TABLE x; --"
	commit(t, s, &store.Changes{Inserts: []*store.Instance{
		withAttributes("order", "o-1", now(), map[string]string{"supplier": hostile, "region": "eu"}),
	}})
	checkStrings(t, "hostile but valid value", query(t, s, byAttrs("supplier", hostile)), []string{"order/o-1"})
	for _, tc := range []struct{ name, attr, value string }{
		{"NUL in value", "region", "eu\x00"},
		{"invalid UTF-8 in value", "region", "eu\xff"},
		{"empty value", "region", ""},
		{"NUL in name", "reg\x00ion", "eu"},
		{"invalid name", "region; --", "eu"},
	} {
		ins, err := s.(readmodel.InstanceQuerier).QueryInstances(t.Context(), byAttrs(tc.attr, tc.value))
		if err != nil || len(ins) != 0 {
			t.Errorf("%s: got %v, error %v; want no instance and no error", tc.name, instanceKeys(ins), err)
		}
	}
	// The store still answers afterwards.
	checkStrings(t, "query after hostile ones", query(t, s, byAttrs("region", "eu")), []string{"order/o-1"})
}

func testAttributesGoWithSweptInstances(t *testing.T, s store.Store) {
	base := now()
	in := withAttributes("order", "o-1", base.Add(-48*time.Hour), map[string]string{"supplier": "acme"})
	in.FinishedAt = in.UpdatedAt
	commit(t, s, &store.Changes{Inserts: []*store.Instance{in}})
	if _, err := s.Sweep(t.Context(), &store.SweepParams{FinishedBefore: base.Add(-time.Hour), Limit: 10}); err != nil {
		t.Fatalf("sweep: got error %v, want nil", err)
	}
	// A new instance under the same key, without attributes, must not
	// inherit the swept one's.
	commit(t, s, &store.Changes{Inserts: []*store.Instance{newInstance("order", "o-1", base)}})
	checkStrings(t, "supplier=acme after the sweep", query(t, s, byAttrs("supplier", "acme")), nil)
	commit(t, s, &store.Changes{Inserts: []*store.Instance{
		withAttributes("order", "o-2", base, map[string]string{"supplier": "acme"}),
	}})
	checkStrings(t, "a later instance with the value", query(t, s, byAttrs("supplier", "acme")), []string{"order/o-2"})
}

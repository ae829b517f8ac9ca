package enginetest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// PurchaseOrder is the state of the purchase-order saga, whose supplier is
// a searchable attribute.
type PurchaseOrder struct {
	Supplier string `json:"supplier"`
}

// POPlaced starts a purchase order; POSupplierChanged changes its supplier.
type (
	POPlaced struct {
		ID       string `json:"id"`
		Supplier string `json:"supplier"`
	}
	POSupplierChanged struct {
		ID       string `json:"id"`
		Supplier string `json:"supplier"`
	}
)

// POType is the purchase-order saga's type.
const POType = "purchase-order"

// POMachine builds the purchase-order saga with its "supplier" attribute.
func POMachine() *saga.Machine[PurchaseOrder] {
	m := saga.New[PurchaseOrder](POType)
	open := m.State("Open")
	placed := saga.NewEvent[POPlaced](m, func(e POPlaced) string { return e.ID })
	changed := saga.NewEvent[POSupplierChanged](m, func(e POSupplierChanged) string { return e.ID })
	m.Initially(saga.When(placed).Then(func(c *saga.Context[PurchaseOrder], e POPlaced) error {
		c.Data.Supplier = e.Supplier
		return nil
	}).TransitionTo(open))
	m.During(open, saga.Ignore(placed), saga.When(changed).Then(func(c *saga.Context[PurchaseOrder], e POSupplierChanged) error {
		c.Data.Supplier = e.Supplier
		return nil
	}))
	m.Attribute("supplier", func(po PurchaseOrder) string { return po.Supplier })
	return m
}

// Attributes runs the purchase-order saga on q (store and queue): once a
// message is applied the saga is searchable by its new attribute value
// (in either Unicode spelling) and no longer by its old one, and a value
// no store can keep dead-letters its message as invalid_attribute.
func Attributes(t *testing.T, q store.Queue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	e := startPOEngine(t, q)
	apply := func(id string, msg any) error {
		t.Helper()
		env, err := idem.NewEnvelope(id, msg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.PublishAndWait(ctx, env)
		return err
	}
	find := func(supplier string) []string {
		t.Helper()
		ins, err := q.(readmodel.InstanceQuerier).QueryInstances(ctx, &readmodel.InstanceQuery{
			SagaType: POType, Attributes: map[string]string{"supplier": supplier}})
		if err != nil {
			t.Fatalf("query supplier=%q: %v", supplier, err)
		}
		keys := make([]string, len(ins))
		for i, in := range ins {
			keys[i] = in.Key
		}
		return keys
	}
	expect := func(supplier string, want ...string) {
		t.Helper()
		if got := find(supplier); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("supplier=%q: got keys %q, want %q", supplier, got, want)
		}
	}

	if err := apply("m-1", POPlaced{ID: "po-1", Supplier: "Mu\u0308ller"}); err != nil {
		t.Fatalf("apply POPlaced: %v", err)
	}
	expect("M\u00fcller", "po-1")
	expect("Mu\u0308ller", "po-1")
	if err := apply("m-2", POPlaced{ID: "po-2", Supplier: "acme"}); err != nil {
		t.Fatalf("apply POPlaced: %v", err)
	}
	if err := apply("m-3", POSupplierChanged{ID: "po-1", Supplier: "acme"}); err != nil {
		t.Fatalf("apply POSupplierChanged: %v", err)
	}
	expect("acme", "po-1", "po-2")
	expect("M\u00fcller")

	err := apply("m-4", POPlaced{ID: "po-3", Supplier: "bad\x00"})
	if !errors.Is(err, idem.ErrDeadLettered) || !strings.Contains(err.Error(), idem.ReasonInvalidAttribute) {
		t.Fatalf("apply with a NUL in the attribute: %v, want ErrDeadLettered with reason %s", err, idem.ReasonInvalidAttribute)
	}
	dl, err := q.GetDeadLetter(ctx, "m-4")
	if err != nil || dl.Reason != idem.ReasonInvalidAttribute || dl.Attempts != 1 {
		t.Fatalf("dead letter m-4: %+v, %v; want reason %s after one attempt", dl, err, idem.ReasonInvalidAttribute)
	}
	expect("bad")
}

func startPOEngine(t *testing.T, q store.Queue) *idem.Engine {
	t.Helper()
	e, err := idem.NewEngine(q, q, &idem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(POMachine()); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return e
}

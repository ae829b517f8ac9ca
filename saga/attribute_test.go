package saga_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/saga"
)

type poState struct {
	Supplier string `json:"supplier"`
	Region   string `json:"region"`
}

type poPlaced struct {
	ID, Supplier, Region string
}

func poMachine(t *testing.T) *saga.Machine[poState] {
	t.Helper()
	m := saga.New[poState]("po")
	open := m.State("Open")
	placed := saga.NewEvent[poPlaced](m, func(e poPlaced) string { return e.ID })
	m.Initially(saga.When(placed).Then(func(c *saga.Context[poState], e poPlaced) error {
		c.Data.Supplier, c.Data.Region = e.Supplier, e.Region
		return nil
	}).TransitionTo(open))
	m.Attribute("supplier", func(s poState) string { return s.Supplier })
	m.Attribute("region", func(s poState) string { return s.Region })
	return m
}

func applyPlaced(m *saga.Machine[poState], e poPlaced) (saga.Result, error) {
	return m.Apply(saga.Input{Msg: e, MsgType: saga.MessageType(e), Key: e.ID, MessageID: "m-1", Now: time.Unix(0, 0)})
}

func TestAttributesComputedFromTheNewStateInNFC(t *testing.T) {
	m := poMachine(t)
	res, err := applyPlaced(m, poPlaced{ID: "po-1", Supplier: "Mu\u0308ller", Region: ""})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Attributes) != 1 || res.Attributes["supplier"] != "M\u00fcller" {
		t.Errorf("attributes %q: want only supplier in NFC (an empty region is absent)", res.Attributes)
	}
	if got := m.Attributes(); len(got) != 2 || got[0] != "supplier" || got[1] != "region" {
		t.Errorf("Attributes() = %v, want [supplier region]", got)
	}
}

func TestAttributeValuesThatCannotBeStoredFail(t *testing.T) {
	m := poMachine(t)
	for name, v := range map[string]string{
		"NUL":           "acme\x00",
		"invalid UTF-8": "acme\xff",
		"newline":       "acme\nHEADER: x",
		"escape":        "\x1b[31macme",
		"too long":      strings.Repeat("é", 200),
	} {
		_, err := applyPlaced(m, poPlaced{ID: "po-1", Supplier: v})
		if !errors.Is(err, saga.ErrAttribute) || !strings.Contains(err.Error(), `"supplier"`) {
			t.Errorf("%s: Apply error %v, want ErrAttribute naming the attribute", name, err)
		}
	}
}

func TestAttributeDeclarationIsValidated(t *testing.T) {
	for name, decl := range map[string]func(m *saga.Machine[poState]){
		"empty name":  func(m *saga.Machine[poState]) { m.Attribute("", func(poState) string { return "" }) },
		"bad charset": func(m *saga.Machine[poState]) { m.Attribute("a b", func(poState) string { return "" }) },
		"digit first": func(m *saga.Machine[poState]) { m.Attribute("1a", func(poState) string { return "" }) },
		"too long": func(m *saga.Machine[poState]) {
			m.Attribute(strings.Repeat("a", 65), func(poState) string { return "" })
		},
		"duplicate":    func(m *saga.Machine[poState]) { m.Attribute("supplier", func(poState) string { return "" }) },
		"nil function": func(m *saga.Machine[poState]) { m.Attribute("colour", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Attribute did not panic", name)
				}
			}()
			decl(poMachine(t))
		}()
	}
}

package saga_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/idemhq/idem/saga"
)

func TestDecodeData(t *testing.T) {
	type doc struct {
		N int `json:"n"`
	}
	m := saga.New[doc]("decode")
	m.Upgrade(1, func(old json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{"n":2}`), nil })
	m.Upgrade(2, func(old json.RawMessage) (json.RawMessage, error) { panic("boom") })

	if _, err := m.DecodeData([]byte(`{"n":1}`), 1); !errors.Is(err, saga.ErrPanic) {
		t.Fatalf("panicking upgrade: got %v, want ErrPanic", err)
	}
	got, err := m.DecodeData([]byte(`{"n":5}`), 3)
	if err != nil || got.N != 5 {
		t.Fatalf("current version: got %+v, %v; want n=5", got, err)
	}
	if _, err := m.DecodeData([]byte(`{"n":5}`), 4); !errors.Is(err, saga.ErrSchema) {
		t.Fatalf("newer version: got %v, want ErrSchema", err)
	}
	if _, err := m.DecodeData([]byte(`not json`), 3); !errors.Is(err, saga.ErrSchema) {
		t.Fatalf("bad JSON: got %v, want ErrSchema", err)
	}
}

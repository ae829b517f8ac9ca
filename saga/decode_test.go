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

// CheckData fails exactly where DecodeData does: an upgrade that refuses
// one document, a version too new, bad JSON; a panic is ErrPanic.
func TestCheckData(t *testing.T) {
	type doc struct {
		N int `json:"n"`
	}
	m := saga.New[doc]("check")
	m.Upgrade(1, func(old json.RawMessage) (json.RawMessage, error) {
		if string(old) == `{"n":"bad"}` {
			return nil, errors.New("n is not a number")
		}
		return old, nil
	})
	m.Upgrade(2, func(old json.RawMessage) (json.RawMessage, error) {
		if string(old) == `{"n":-1}` {
			panic("negative")
		}
		return old, nil
	})
	for _, c := range []struct {
		data    string
		version int
		want    error
	}{
		{`{"n":1}`, 1, nil},
		{`{"n":1}`, 0, nil}, // 0 means 1
		{`{"n":3}`, 3, nil},
		{`{"n":"bad"}`, 1, saga.ErrSchema},
		{`{"n":-1}`, 2, saga.ErrPanic},
		{`{"n":1}`, 4, saga.ErrSchema},
		{`{"n":"x"}`, 3, saga.ErrSchema},
		{"\x00", 3, saga.ErrSchema},
	} {
		err := m.CheckData([]byte(c.data), c.version)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("CheckData(%q, %d) = %v, want %v", c.data, c.version, err, c.want)
		}
	}
}

package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/idemhq/idem/store"
)

// A dead letter keeps the envelope of hostile input: U+0000 in its ID,
// type, correlation and causation IDs and headers (the engine derives the
// dead letter's own ID). Invalid UTF-8 is not required to survive: JSON
// cannot carry it.
func testDeadLetterKeepsHostileEnvelope(t *testing.T, s store.Store) {
	at := now()
	env := envelope("hostile\x00id", at)
	env.Type = "test.Ping\x00"
	env.CorrelationID = "corr\x00"
	env.CausationID = "\x00"
	env.IdempotencyKey = "idem\x00"
	env.Headers["traceparent"] = "00-\x00-01"
	env.Headers["x-\x00"] = "<script>alert(1)</script>"
	env.Body = []byte("{\"text\":\"a\\u0000b\"}\x00")
	dl := store.DeadLetter{ID: "dl-hostile", Envelope: env, Reason: "invalid_id", Error: `envelope id: "hostile\x00id" has U+0000`,
		Attempts: 1, FirstFailedAt: at, LastFailedAt: at}
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{dl}})
	got, err := s.GetDeadLetter(context.Background(), dl.ID)
	if err != nil {
		t.Fatalf("GetDeadLetter: %v", err)
	}
	if !reflect.DeepEqual(got.Envelope, env) {
		t.Errorf("envelope after round trip:\n got %#v\nwant %#v", got.Envelope, env)
	}
}

// A state document holding U+0000 is stored and read back exactly, or the
// commit fails with store.ErrRejected (never a plain error the engine
// would retry) and writes nothing.
func testStateWithNULIsKeptOrRejected(t *testing.T, s store.Store) {
	ctx := context.Background()
	in := newInstance("hostile", "k", now())
	in.Data = []byte(`{"text":"a\u0000b","quote":"\\u0000 is fine"}`)
	u := begin(t, s)
	err := u.Commit(ctx, &store.Changes{Inserts: []*store.Instance{in}})
	_ = u.Rollback(ctx)
	u = begin(t, s)
	defer func() { _ = u.Rollback(ctx) }()
	r, lerr := u.Load(ctx, &store.LoadParams{Keys: []store.Key{key("hostile", "k")}})
	if lerr != nil {
		t.Fatalf("load: %v", lerr)
	}
	got := r.Instances[key("hostile", "k")]
	switch {
	case err == nil && (got == nil || string(got.Data) != string(in.Data)):
		t.Errorf("commit succeeded but the state reads back as %v, want %s", got, in.Data)
	case err != nil && !errors.Is(err, store.ErrRejected):
		t.Errorf("commit error %v: want nil or one wrapping store.ErrRejected", err)
	case err != nil && got != nil:
		t.Errorf("commit was rejected but the instance was written: %+v", got)
	}
}

package natsjs_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
)

// An operator's replay of a dead letter, and "retry now" of a message in
// backoff, come well within the stream's duplicate window (2 minutes by
// default) of the message's first publish. Each must still reach the
// engine and be applied once, while a plain copy of the message published
// again is dropped by the stream.

// Credit adds Amount to the ledger Account.
type Credit struct {
	Account string `json:"account"`
	Amount  int    `json:"amount"`
}

// ledger is a saga's state: what it credited, and how many times.
type ledger struct {
	Total   int `json:"total"`
	Credits int `json:"credits"`
}

// republishRig is an engine on memstore and a fresh stream of the shared
// server, with an admin server, running a ledger saga whose credits fail
// with failure while broken is set.
type republishRig struct {
	e      *idem.Engine
	st     *memstore.Store
	tr     *natsjs.Transport
	admin  *httptest.Server
	stream string
	broken atomic.Bool
}

func newRepublishRig(t *testing.T, failure func() error) *republishRig {
	t.Helper()
	r := &republishRig{st: memstore.New(nil), stream: randName("R_")}
	r.broken.Store(true)
	r.tr = open(t, natsjs.Config{Stream: r.stream, Partitions: 4})
	m := ledgerMachine(func() error {
		if r.broken.Load() {
			return failure()
		}
		return nil
	})
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := idem.NewEngine(r.st, r.tr, &idem.Config{Logger: logger, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(m); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.e = e
	h, err := admin.New(e, r.st, &admin.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	r.admin = httptest.NewServer(h)
	t.Cleanup(func() {
		r.admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Stop(ctx); err != nil {
			t.Errorf("stop engine: %v", err)
		}
		_ = r.st.Close()
	})
	return r
}

// ledgerMachine is the ledger saga; a credit fails with what check
// returns, and applies when it returns nil.
func ledgerMachine(check func() error) *saga.Machine[ledger] {
	m := saga.New[ledger]("ledger")
	open := m.State("Open")
	credit := saga.NewEvent[Credit](m, func(c Credit) string { return c.Account })
	apply := func(c *saga.Context[ledger], e Credit) error {
		if err := check(); err != nil {
			return err
		}
		c.Data.Total += e.Amount
		c.Data.Credits++
		return nil
	}
	m.Initially(saga.When(credit).Then(apply).TransitionTo(open))
	m.During(open, saga.When(credit).Then(apply))
	return m
}

// publish publishes a credit of 1 to account under id and returns it.
func (r *republishRig) publish(t *testing.T, id, account string) idem.Envelope {
	t.Helper()
	env, err := r.e.NewEnvelope(id, Credit{Account: account, Amount: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.e.Publish(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	return env
}

// ledger returns account's saga state (zero when it has none).
func (r *republishRig) ledger(t *testing.T, account string) ledger {
	t.Helper()
	ctx := t.Context()
	uow, err := r.st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	k := store.Key{SagaType: "ledger", Key: account}
	res, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}})
	if err != nil {
		t.Fatal(err)
	}
	var l ledger
	if in := res.Instances[k]; in != nil {
		if err := json.Unmarshal(in.Data, &l); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// lastSeq is the stream's last sequence: it grows with every message the
// stream stores, and not with a copy it drops as a duplicate.
func (r *republishRig) lastSeq(t *testing.T) uint64 {
	t.Helper()
	nc, err := nats.Connect(sharedServer(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), r.stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// checkDropped publishes env again as an ordinary producer would and
// fails unless the stream dropped it as a duplicate.
func (r *republishRig) checkDropped(t *testing.T, env idem.Envelope) {
	t.Helper()
	before := r.lastSeq(t)
	if err := r.e.Publish(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	if after := r.lastSeq(t); after != before {
		t.Errorf("a plain copy of %s published again: the stream's last sequence went from %d to %d, want it dropped as a duplicate", env.ID, before, after)
	}
}

// A dead letter replayed a moment after its first publish is applied
// once, and settled as succeeded.
func TestReplayWithinTheDuplicateWindowIsApplied(t *testing.T) {
	t.Parallel()
	r := newRepublishRig(t, func() error { return idem.Permanent(errors.New("handler bug")) })
	env := r.publish(t, "credit-1", "acct-1")
	enginetest.WaitFor(t, 30*time.Second, "dead-lettered", func() (bool, error) {
		_, err := r.st.GetDeadLetter(t.Context(), env.ID)
		return err == nil, nil
	})
	r.broken.Store(false) // the fix is deployed

	if err := r.e.ReplayDeadLetter(t.Context(), env.ID); err != nil {
		t.Fatal(err)
	}
	var dl *store.DeadLetter
	enginetest.WaitFor(t, 30*time.Second, "settled: the replay is still pending (did the stream drop it as a duplicate?)", func() (bool, error) {
		var err error
		dl, err = r.st.GetDeadLetter(t.Context(), env.ID)
		return err == nil && dl.LastReplay() != nil && dl.LastReplay().Outcome != store.ReplayPending, nil
	})
	if got := dl.LastReplay().Outcome; got != store.ReplaySucceeded {
		t.Errorf("the replay of credit-1 settled as %q, want %q", got, store.ReplaySucceeded)
	}
	if l := r.ledger(t, "acct-1"); l.Total != 1 || l.Credits != 1 {
		t.Errorf("after the replay: ledger %+v, want one credit of 1", l)
	}
	r.checkDropped(t, env)
}

// A message in backoff retried now through the admin API a moment after
// its first publish is applied once; another operator's copy is an inbox
// duplicate.
func TestRetryNowWithinTheDuplicateWindowIsApplied(t *testing.T) {
	t.Parallel()
	r := newRepublishRig(t, func() error { return idem.RetryAfter(time.Hour, errors.New("service down")) })
	env := r.publish(t, "credit-2", "acct-2")
	k := store.Key{SagaType: "ledger", Key: "acct-2"}
	var rs []store.Retry
	enginetest.WaitFor(t, 30*time.Second, "recorded as retrying", func() (bool, error) {
		var err error
		rs, err = r.st.Retries(t.Context(), k)
		return len(rs) == 1, err
	})
	r.broken.Store(false) // the service is back; the message waits an hour

	retryNow := func(actor string) {
		t.Helper()
		path := r.admin.URL + "/api/sagas/ledger/acct-2/retries/" + url.PathEscape(rs[0].ID) + "/retry"
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(admin.ActorHeader, actor)
		resp, err := r.admin.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST %s: %d %s, want 202", path, resp.StatusCode, body)
		}
	}
	retryNow("alice")
	enginetest.WaitFor(t, 30*time.Second, "applied: the retry now (did the stream drop it as a duplicate?)", func() (bool, error) {
		return r.e.Stats().Applied == 1, nil
	})
	if l := r.ledger(t, "acct-2"); l.Total != 1 || l.Credits != 1 {
		t.Errorf("after the retry now: ledger %+v, want one credit of 1", l)
	}
	r.checkDropped(t, env)

	// Another operator's copy reaches the engine too, and the inbox skips it.
	cp := env.Clone()
	cp.Headers = map[string]string{transport.HeaderActor: "api: bob"}
	if err := r.e.Publish(t.Context(), cp); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, 30*time.Second, "skipped by the inbox: a second operator's copy", func() (bool, error) {
		return r.e.Stats().Duplicates == 1, nil
	})
	if l := r.ledger(t, "acct-2"); l.Total != 1 || l.Credits != 1 {
		t.Errorf("after a second copy: ledger %+v, want one credit of 1", l)
	}
}

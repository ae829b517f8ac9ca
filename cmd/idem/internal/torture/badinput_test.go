package torture

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

// corpusCase is one file of testdata/badinput: envelopes to publish on a
// fresh SQLite store and queue, and the expected outcome.
type corpusCase struct {
	Name         string `json:"name"`
	MaxKeyLen    int    `json:"max_key_len"`
	MaxBodyBytes int    `json:"max_body_bytes"`
	NotFound     string `json:"not_found"`
	Existing     *struct {
		Key           string          `json:"key"`
		State         string          `json:"state"`
		SchemaVersion int             `json:"schema_version"`
		Data          json.RawMessage `json:"data"`
	} `json:"existing"`
	Envelopes []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		BodyText string `json:"body_text"`
		// TypeSuffixHex is appended to the type as raw bytes (invalid
		// UTF-8 cannot be written in a JSON file).
		TypeSuffixHex  string            `json:"type_suffix_hex"`
		IdempotencyKey string            `json:"idempotency_key"`
		CorrelationID  string            `json:"correlation_id"`
		Headers        map[string]string `json:"headers"`
	} `json:"envelopes"`
	Expect struct {
		DeadLetters  map[string]string `json:"dead_letters"`
		Sagas        map[string]int    `json:"sagas"`
		NoSaga       []string          `json:"no_saga"`
		SagaCount    *int              `json:"saga_count"`
		PublishError string            `json:"publish_error"`
	} `json:"expect"`
}

var padRE = regexp.MustCompile(`\{\{PAD:(\d+)\}\}`)

// pad expands {{PAD:n}} into n letters x.
func pad(s string) string {
	return padRE.ReplaceAllStringFunc(s, func(m string) string {
		n, _ := strconv.Atoi(padRE.FindStringSubmatch(m)[1])
		return strings.Repeat("x", n)
	})
}

// corpusMachine is the counter saga at schema version 2: version 1 called
// the total "count".
func corpusMachine(notFound string) *saga.Machine[enginetest.Counter] {
	m := enginetest.Machine()
	m.Upgrade(1, func(old json.RawMessage) (json.RawMessage, error) {
		var v1 struct {
			Count int `json:"count"`
		}
		if err := json.Unmarshal(old, &v1); err != nil {
			return nil, err
		}
		return json.Marshal(enginetest.Counter{Total: v1.Count})
	})
	if notFound == "dead_letter" {
		m.OnNotFound(saga.NotFoundDeadLetter)
	}
	return m
}

// TestBadInputCorpus runs every case of testdata/badinput on the SQLite
// store and queue: each bad input must end in the dead-letter store with
// its named reason, or follow the documented policy.
func TestBadInputCorpus(t *testing.T) {
	files, err := filepath.Glob("testdata/badinput/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".json"), func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var c corpusCase
			if err := json.Unmarshal(b, &c); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			t.Log(c.Name)
			runCorpusCase(t, c)
		})
	}
}

func runCorpusCase(t *testing.T, c corpusCase) {
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	path := filepath.Join(t.TempDir(), "idem.db")
	st, err := sqlitestore.Open(ctx, path, &sqlitestore.Config{Lease: 5 * time.Second, PollInterval: 10 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	db, err := openDB(path, "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if ex := c.Existing; ex != nil {
		u, err := st.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if err := u.Commit(ctx, &store.Changes{Inserts: []*store.Instance{{SagaType: enginetest.SagaType, Key: ex.Key, State: ex.State,
			Data: ex.Data, SchemaVersion: ex.SchemaVersion, Version: 1, CreatedAt: now, UpdatedAt: now}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Retries are quick: a message given back (a saga another definition
	// wrote) reaches its dead letter after MaxAttempts within a second.
	e, err := idem.NewEngine(st, st, &idem.Config{Logger: logger, MaxKeyLen: c.MaxKeyLen, MaxBodyBytes: c.MaxBodyBytes, TimerInterval: 10 * time.Millisecond,
		RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(corpusMachine(c.NotFound)); err != nil {
		t.Fatal(err)
	}
	if err := e.Handle(addedType, func(context.Context, idem.Envelope) error { return nil }); err != nil {
		t.Fatal(err)
	}
	types := map[string]string{"Inc": incType, "Tick": tickType}
	var envs []idem.Envelope
	for _, env := range c.Envelopes {
		typ := env.Type
		if full, ok := types[typ]; ok {
			typ = full
		}
		suffix, err := hex.DecodeString(env.TypeSuffixHex)
		if err != nil {
			t.Fatalf("type_suffix_hex: %v", err)
		}
		envs = append(envs, idem.Envelope{ID: env.ID, Type: typ + string(suffix), Body: []byte(pad(env.BodyText)),
			IdempotencyKey: env.IdempotencyKey, CorrelationID: env.CorrelationID, Headers: env.Headers})
	}
	err = st.Publish(ctx, envs)
	switch {
	case c.Expect.PublishError != "" && (err == nil || !strings.Contains(err.Error(), c.Expect.PublishError)):
		t.Fatalf("publish: got error %v, want one containing %q", err, c.Expect.PublishError)
	case c.Expect.PublishError == "" && err != nil:
		t.Fatalf("publish: %v", err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Poll until the queue and the timers are empty, with a deadline.
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := inFlight(ctx, db, true)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages and timers still in flight after 20s", n)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	dls, err := st.ListDeadLetters(ctx, &store.ListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range dls {
		got[d.Envelope.ID] = d.Reason
		if d.Error == "" {
			t.Errorf("dead letter %s has no error text", d.ID)
		}
	}
	if want := c.Expect.DeadLetters; want != nil || len(got) > 0 {
		for id, reason := range want {
			if got[id] != reason {
				t.Errorf("message %q: dead letter reason %q, want %q", id, got[id], reason)
			}
		}
		for id, reason := range got {
			if _, ok := want[id]; !ok {
				t.Errorf("message %q dead-lettered (%s), not expected", id, reason)
			}
		}
	}
	ins, err := st.ListInstances(ctx, &store.ListParams{SagaType: enginetest.SagaType, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	totals := map[string]int{}
	for _, in := range ins {
		var d enginetest.Counter
		if in.SchemaVersion == 2 || in.SchemaVersion == 9 {
			_ = json.Unmarshal(in.Data, &d)
		}
		totals[in.Key] = d.Total
	}
	for key, want := range c.Expect.Sagas {
		key = pad(key)
		if tot, ok := totals[key]; !ok || tot != want {
			t.Errorf("saga %q: total %d (exists %v), want %d", key, tot, ok, want)
		}
	}
	for _, key := range c.Expect.NoSaga {
		if _, ok := totals[key]; ok {
			t.Errorf("saga %q exists, want none", key)
		}
	}
	if c.Expect.SagaCount != nil && len(totals) != *c.Expect.SagaCount {
		t.Errorf("%d sagas %v, want %d", len(totals), totals, *c.Expect.SagaCount)
	}
}

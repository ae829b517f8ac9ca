package torture

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/text/unicode/norm"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/searchimport"
	"github.com/idemhq/idem/internal/countersaga"
	"github.com/idemhq/idem/saga"
)

// Record is one line of the driver's history: a message it sent, with what
// the model expects of it. The history is an append-only file of JSON
// lines, written before the message is published.
type Record struct {
	Seq  int       `json:"seq"`
	At   time.Time `json:"at"`
	ID   string    `json:"id"`
	Type string    `json:"type"`
	// Kind is what the message is to the model: inc, search_started,
	// search_saved, search_renotified, not_found, bad_input or stale_timer;
	// or schedule, a schedule the workers register (no message).
	Kind string `json:"kind"`
	// Saga and Key are the saga the message is for (Key canonical).
	Saga string `json:"saga,omitempty"`
	Key  string `json:"key,omitempty"`
	// N is an increment's amount.
	N int `json:"n,omitempty"`
	// Want is the search's predicted final state (Completed or Error) and
	// Files its number of reference files, on search_saved records.
	Want  string `json:"want,omitempty"`
	Files int    `json:"files,omitempty"`
	// Reason is the dead-letter reason a bad input must get.
	Reason string `json:"reason,omitempty"`
	// Every, Missed and Grace declare a schedule named Key (kind
	// schedule): its interval, missed-tick policy and grace.
	Every  time.Duration `json:"every,omitempty"`
	Missed string        `json:"missed,omitempty"`
	Grace  time.Duration `json:"grace,omitempty"`
	// Copies is how many times it was published.
	Copies int `json:"copies"`
}

// Record kinds.
const (
	kindInc        = "inc"
	kindStarted    = "search_started"
	kindSaved      = "search_saved"
	kindRenotified = "search_renotified"
	kindNotFound   = "not_found"
	kindBad        = "bad_input"
	kindStaleTimer = "stale_timer"
	kindSchedule   = "schedule"
	// kindPublished marks, in a limits run, that every message recorded
	// before it has been published: its At bounds when they became
	// visible.
	kindPublished = "published"
)

// history appends records to the history file.
type history struct {
	mu  sync.Mutex
	f   *os.File
	w   *bufio.Writer
	seq int
}

func createHistory(path string) (*history, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create the history: %w", err)
	}
	return &history{f: f, w: bufio.NewWriter(f)}, nil
}

func (h *history) append(rs ...*Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range rs {
		h.seq++
		r.Seq, r.At = h.seq, time.Now().UTC()
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		h.w.Write(b)
		h.w.WriteByte('\n')
	}
	if err := h.w.Flush(); err != nil {
		return fmt.Errorf("write the history: %w", err)
	}
	return nil
}

func (h *history) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.w.Flush(); err != nil {
		return err
	}
	if err := h.f.Sync(); err != nil {
		return err
	}
	return h.f.Close()
}

// ReadHistory reads a history file.
func ReadHistory(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the history: %w", err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("history line %d: %w", len(out)+1, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// send is one message of a wave with its record.
type send struct {
	env idem.Envelope
	rec *Record
}

var (
	incType   = saga.MessageType(countersaga.Inc{})
	tickType  = saga.MessageType(countersaga.Tick{})
	addedType = saga.MessageType(countersaga.Added{})
	savedType = saga.MessageType(searchimport.SearchUploadSaved{})
	parseType = saga.MessageType(searchimport.StartParsingReferenceFile{})
)

// searchFaults reports whether the workload marked a search so that the
// parser fails its first file.
func searchFaults(id string) bool { return strings.HasSuffix(id, "-badfile") }

func searchFile(i int) string { return fmt.Sprintf("refs-%d.ris", i) }

// generator builds the workload's waves deterministically from the seed.
type generator struct {
	rng      *rand.Rand
	wave     int
	searches int
	bad      bool
	limits   bool // a limits run: the driver's messages carry a tenant
}

func mustEnvelope(id string, msg any) idem.Envelope {
	env, err := idem.NewEnvelope(id, msg)
	if err != nil {
		panic(err) // the workload's messages always encode
	}
	return env
}

// next returns the next wave: counters, searches and, every fifth wave,
// bad input, a key in NFC and NFD forms, and a message for a saga that
// does not exist.
func (g *generator) next() []send {
	w := g.wave
	g.wave++
	var out []send
	add := func(env idem.Envelope, r *Record) {
		r.ID, r.Type = env.ID, env.Type
		if g.limits {
			tagTenant(&env, r)
		}
		out = append(out, send{env: env, rec: r})
	}
	for k := range 4 {
		key := fmt.Sprintf("c%05d-%d", w, k)
		for i := range 3 {
			add(mustEnvelope(fmt.Sprintf("inc-%s-%d", key, i), countersaga.Inc{Key: key, N: i + 1}),
				&Record{Kind: kindInc, Saga: countersaga.SagaType, Key: key, N: i + 1})
		}
	}
	for range 2 {
		i := g.searches
		g.searches++
		id := fmt.Sprintf("search-%05d", i)
		want, files := "Completed", 1+i%3
		if i%10 == 9 {
			id += "-badfile"
			want = "Error"
		}
		fs := make([]string, files)
		for f := range fs {
			fs[f] = searchFile(f)
		}
		md := searchimport.Metadata{SearchID: id, ProjectID: fmt.Sprintf("p-%d", i%13), SearchName: "Search " + id, ReferenceFiles: fs}
		saved := md
		if i%25 == 12 {
			saved.ReferenceFiles, want, files = nil, "Error", 0
		}
		if i%7 != 3 {
			add(mustEnvelope("api-"+id, searchimport.SearchUploadStarted{Metadata: md}), &Record{Kind: kindStarted, Saga: searchimport.SagaType, Key: id})
		}
		add(mustEnvelope("s3-"+id, searchimport.SearchUploadSaved{Metadata: saved}),
			&Record{Kind: kindSaved, Saga: searchimport.SagaType, Key: id, Want: want, Files: files})
		if i%5 == 2 { // storage notified again under a new ID
			add(mustEnvelope("s3-"+id+"-again", searchimport.SearchUploadSaved{Metadata: saved}),
				&Record{Kind: kindRenotified, Saga: searchimport.SagaType, Key: id, Want: want, Files: files})
		}
	}
	if g.bad && w%5 == 0 {
		// One saga under two spellings of one key.
		nfc := fmt.Sprintf("café-%05d", w)
		nfd := norm.NFD.String(nfc)
		add(mustEnvelope("inc-nfc-"+fmt.Sprint(w), countersaga.Inc{Key: nfc, N: 5}), &Record{Kind: kindInc, Saga: countersaga.SagaType, Key: nfc, N: 5})
		add(mustEnvelope("inc-nfd-"+fmt.Sprint(w), countersaga.Inc{Key: nfd, N: 7}), &Record{Kind: kindInc, Saga: countersaga.SagaType, Key: nfc, N: 7})
		// A tick cannot start a counter: ignored by the not-found policy.
		ghost := fmt.Sprintf("ghost-%05d", w)
		add(mustEnvelope("ghost-"+fmt.Sprint(w), countersaga.Tick{Key: ghost}), &Record{Kind: kindNotFound, Saga: countersaga.SagaType, Key: ghost})
		for _, b := range badInputs(w) {
			add(b.env, &Record{Kind: kindBad, Reason: b.reason})
		}
	}
	g.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

type badInput struct {
	env    idem.Envelope
	reason string
}

// badInputs are the wave's bad messages, each with the dead-letter reason
// it must get.
func badInputs(w int) []badInput {
	id := func(s string) string { return fmt.Sprintf("bad-%s-%05d", s, w) }
	raw := func(name, typ, body string) idem.Envelope {
		return idem.Envelope{ID: id(name), Type: typ, Body: []byte(body)}
	}
	return []badInput{
		{raw("json", incType, `{"key": "c-`), idem.ReasonMalformed},
		{raw("type", "torture.Unknown", `{}`), idem.ReasonUnknownType},
		{raw("emptykey", incType, `{"key": "", "n": 1}`), idem.ReasonInvalidKey},
		{raw("nokey", savedType, `{"project_id": "p"}`), idem.ReasonInvalidKey},
		{raw("ctrlkey", incType, `{"key": "a\u0007b", "n": 1}`), idem.ReasonInvalidKey},
		{raw("longkey", incType, `{"key": "`+strings.Repeat("k", 300)+`", "n": 1}`), idem.ReasonInvalidKey},
		{raw("huge", incType, `{"key": "c", "n": 1, "pad": "`+strings.Repeat("x", workerMaxBody)+`"}`), idem.ReasonOversized},
	}
}

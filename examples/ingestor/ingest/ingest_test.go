package ingest_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/ingestor/ingest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

func randHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// backend opens a fresh store for one test; dsn is what a second process
// needs to open the same database (with env for a PostgreSQL schema).
type backend struct {
	name string
	open func(t testing.TB) (q store.Queue, worker []string)
}

func backends() []backend {
	return []backend{
		{"sqlite", func(t testing.TB) (store.Queue, []string) {
			path := t.TempDir() + "/ingestor.db"
			q, err := sqlitestore.Open(context.Background(), path, &sqlitestore.Config{Lease: 3 * time.Second, PollInterval: 20 * time.Millisecond, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = q.Close() })
			return q, []string{"INGESTOR_TEST_DB=" + path}
		}},
		{"postgres", func(t testing.TB) (store.Queue, []string) {
			url := testenv.PostgresURL(t)
			schema := "ingest_" + randHex()
			ctx := context.Background()
			q, err := pgstore.Open(ctx, url, &pgstore.Config{Schema: schema, Migrate: true, Lease: 3 * time.Second, PollInterval: 50 * time.Millisecond, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = q.Close()
				conn, err := pgx.Connect(ctx, url)
				if err != nil {
					t.Errorf("drop schema %s: %v", schema, err)
					return
				}
				defer conn.Close(ctx)
				if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
					t.Errorf("drop schema %s: %v", schema, err)
				}
			})
			return q, []string{"INGESTOR_TEST_DB=" + url, "INGESTOR_TEST_PG_SCHEMA=" + schema}
		}},
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func engineConfig() *idem.Config {
	return &idem.Config{BatchSize: 16, RetryBase: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond, TimerInterval: 50 * time.Millisecond}
}

// harness is one app with its HTTP server.
type harness struct {
	app *ingest.App
	srv *httptest.Server
}

func newHarness(t *testing.T, q store.Queue, cfg *ingest.Config, start bool) *harness {
	t.Helper()
	if cfg == nil {
		cfg = &ingest.Config{}
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	if cfg.Engine == nil {
		cfg.Engine = engineConfig()
	}
	if cfg.ConfirmWait == 0 {
		// An upload answers 201 once a worker has created its job, or 202
		// after ConfirmWait. The tests assert 201, which must not depend
		// on how fast a loaded machine starts a worker process or applies
		// a file of 256 KiB: a minute is the bound of a stuck worker, not
		// of a slow one.
		cfg.ConfirmWait = time.Minute
	}
	app, err := ingest.New(q, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if start {
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := app.Stop(ctx); err != nil {
				t.Errorf("stop: %v", err)
			}
		})
	}
	srv := httptest.NewServer(app.Handler())
	t.Cleanup(srv.Close)
	return &harness{app: app, srv: srv}
}

// makeCSV returns a file of n lines; the lines whose 0-based index is in
// bad name depot FH99, which is not onboarded by default.
func makeCSV(n int, seed string, bad func(i int) bool) []byte {
	var b bytes.Buffer
	b.WriteString(strings.Join(ingest.Columns, ",") + "\n")
	for i := range n {
		depot := "FH01"
		if bad != nil && bad(i) {
			depot = "FH99"
		}
		fmt.Fprintf(&b, "ADV-%s-%d,%d,SKU-%05d,%d,2026-03-%02d,%s\n", seed, i/10, i%10+1, i%977, 1+i%50, 1+i%28, depot)
	}
	return b.Bytes()
}

type response struct {
	code int
	body []byte
}

func (r response) job(t testing.TB) ingest.JobView {
	t.Helper()
	var v ingest.JobView
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode job from %d %s: %v", r.code, r.body, err)
	}
	return v
}

func (h *harness) do(t testing.TB, method, path, contentType string, body []byte) response {
	t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{res.StatusCode, b}
}

func (h *harness) upload(t testing.TB, supplier string, csv []byte) response {
	return h.do(t, "POST", "/imports?supplier="+supplier, "text/csv", csv)
}

// waitJob polls the job until done reports true (polling an external
// condition with a deadline).
func (h *harness) waitJob(t testing.TB, id string, what string, done func(v *ingest.JobView) bool) *ingest.JobView {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		v, err := h.app.Job(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if v != nil && done(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: timed out waiting for %s; last seen %+v", id, what, v)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *harness) waitTerminal(t testing.TB, id string) *ingest.JobView {
	t.Helper()
	return h.waitJob(t, id, "a terminal state", func(v *ingest.JobView) bool { return ingest.IsTerminal(v.Status) })
}

// checkChunks checks, from the chunk sagas and their journals, that every
// line of the job is stored by exactly one chunk, each chunk ran once per
// attempt, and the job applied exactly one report per attempt.
func checkChunks(t *testing.T, app *ingest.App, v *ingest.JobView, wantRows int) {
	t.Helper()
	ctx := context.Background()
	rows := map[int]int{}
	for _, c := range v.ChunkResults {
		if c.Reports != c.Attempt {
			t.Errorf("chunk %d: %d reports applied to the job for %d attempts", c.Index, c.Reports, c.Attempt)
		}
		key := ingest.ChunkKey(v.ID, c.Index)
		j, err := app.Store().Journal(ctx, store.Key{SagaType: ingest.ChunkSaga, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if len(j) != c.Attempt {
			t.Errorf("chunk %d: %d journal entries, want one per attempt (%d)", c.Index, len(j), c.Attempt)
		}
	}
	after := v.ID + "/"
	for {
		page, err := app.Store().ListInstances(ctx, &store.ListParams{SagaType: ingest.ChunkSaga, After: after, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range page {
			if !strings.HasPrefix(in.Key, v.ID+"/") {
				page = nil
				break
			}
			after = in.Key
			var c ingest.Chunk
			if err := json.Unmarshal(in.Data, &c); err != nil {
				t.Fatal(err)
			}
			if in.State == string(ingest.ChunkImported) {
				for _, l := range c.Lines {
					rows[l.Row]++
				}
			}
		}
		if len(page) < 100 {
			break
		}
	}
	if len(rows) != wantRows {
		t.Errorf("imported rows: got %d distinct, want %d", len(rows), wantRows)
	}
	for row, n := range rows {
		if n != 1 {
			t.Errorf("row %d imported %d times", row, n)
		}
	}
}

func TestIngestor(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Run("UploadTwice", func(t *testing.T) { testUploadTwice(t, b) })
			t.Run("ConcurrentDuplicates", func(t *testing.T) { testConcurrentDuplicates(t, b) })
			t.Run("Validation", func(t *testing.T) { testValidation(t, b) })
			t.Run("PartialThenRequeue", func(t *testing.T) { testPartialThenRequeue(t, b) })
			t.Run("TransientRetry", func(t *testing.T) { testTransientRetry(t, b) })
			t.Run("WorkerKilled", func(t *testing.T) { testWorkerKilled(t, b) })
			t.Run("EscapeHeavyFileAtLimit", func(t *testing.T) { testEscapeHeavyFileAtLimit(t, b) })
			t.Run("StoreFailure", func(t *testing.T) { testStoreFailure(t, b) })
		})
	}
}

func testUploadTwice(t *testing.T, b backend) {
	q, _ := b.open(t)
	h := newHarness(t, q, &ingest.Config{ChunkSize: 50}, true)
	file := makeCSV(230, "twice", nil)

	first := h.upload(t, "ACME", file)
	if first.code != http.StatusCreated {
		t.Fatalf("first upload: got %d %s, want 201", first.code, first.body)
	}
	id := first.job(t).ID
	if id != ingest.IdempotencyKey(file, "ACME") {
		t.Fatalf("job ID %s is not the idempotency key", id)
	}
	second := h.upload(t, "ACME", file)
	if second.code != http.StatusOK || second.job(t).ID != id {
		t.Fatalf("repeat upload: got %d %s, want 200 with job %s", second.code, second.body, id)
	}
	// The same bytes as a multipart upload are the same job.
	var mp bytes.Buffer
	w := multipart.NewWriter(&mp)
	_ = w.WriteField("supplier", "ACME")
	fw, _ := w.CreateFormFile("file", "advice.csv")
	_, _ = fw.Write(file)
	_ = w.Close()
	third := h.do(t, "POST", "/imports", w.FormDataContentType(), mp.Bytes())
	if third.code != http.StatusOK || third.job(t).ID != id {
		t.Fatalf("multipart repeat: got %d %s, want 200 with job %s", third.code, third.body, id)
	}
	// Another supplier with the same bytes is another job.
	other := h.upload(t, "OTHER", file)
	if other.code != http.StatusCreated || other.job(t).ID == id {
		t.Fatalf("other supplier: got %d, want 201 and a new job", other.code)
	}

	v := h.waitTerminal(t, id)
	if v.Status != string(ingest.Succeeded) || v.Lines != (ingest.Counts{Total: 230, Imported: 230}) || v.Chunks != (ingest.Counts{Total: 5, Imported: 5}) {
		t.Fatalf("job: got %s lines %+v chunks %+v, want Succeeded, 230 lines in 5 chunks", v.Status, v.Lines, v.Chunks)
	}
	checkChunks(t, h.app, v, 230)
	got := h.do(t, "GET", "/imports/"+id, "", nil)
	if got.code != 200 {
		t.Fatalf("GET: %d %s", got.code, got.body)
	}
	gv := got.job(t)
	// Audit: creation, then one entry per chunk report, each with detail.
	if len(gv.Audit) != 6 || gv.Audit[0].From != "Initial" || gv.Audit[0].To != string(ingest.Queued) || gv.Audit[5].To != string(ingest.Succeeded) {
		t.Fatalf("audit trail: got %+v", gv.Audit)
	}
	for _, e := range gv.Audit[1:] {
		if e.Detail == nil || e.Detail.Kind != "chunk" || e.Detail.Status != ingest.StatusImported {
			t.Fatalf("audit entry without chunk detail: %+v", e)
		}
	}
	// Every chunk's detail names its chunk on the wire, chunk 0 too.
	var raw struct {
		Audit []struct {
			Detail map[string]any `json:"detail"`
		} `json:"audit"`
	}
	if err := json.Unmarshal(got.body, &raw); err != nil {
		t.Fatal(err)
	}
	var chunks []float64
	for _, e := range raw.Audit[1:] {
		c, ok := e.Detail["chunk"].(float64)
		if !ok {
			t.Errorf("audit detail %v has no chunk", e.Detail)
		}
		chunks = append(chunks, c)
	}
	if slices.Sort(chunks); !slices.Equal(chunks, []float64{0, 1, 2, 3, 4}) {
		t.Errorf("audit details name chunks %v, want 0 to 4", chunks)
	}
	list := h.do(t, "GET", "/imports?supplier=ACME", "", nil)
	var l struct{ Jobs []ingest.JobView }
	if err := json.Unmarshal(list.body, &l); err != nil || len(l.Jobs) != 1 || l.Jobs[0].ID != id {
		t.Fatalf("list by supplier: got %s (%v)", list.body, err)
	}
	list = h.do(t, "GET", "/imports?status=Succeeded", "", nil)
	if err := json.Unmarshal(list.body, &l); err != nil || len(l.Jobs) < 1 {
		t.Fatalf("list by status: got %s (%v)", list.body, err)
	}
	if nf := h.do(t, "GET", "/imports/nope", "", nil); nf.code != 404 {
		t.Fatalf("unknown job: got %d", nf.code)
	}
}

func testConcurrentDuplicates(t *testing.T, b backend) {
	q, _ := b.open(t)
	h := newHarness(t, q, &ingest.Config{ChunkSize: 25}, true)
	file := makeCSV(100, "concurrent", nil)
	const n = 8
	res := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { res[i] = h.upload(t, "ACME", file) })
	}
	wg.Wait()
	created := 0
	for i, r := range res {
		switch r.code {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Fatalf("upload %d: got %d %s", i, r.code, r.body)
		}
		if r.job(t).ID != res[0].job(t).ID {
			t.Fatalf("uploads name different jobs")
		}
	}
	if created != 1 {
		t.Fatalf("got %d responses 201 Created, want exactly 1", created)
	}
	jobs, err := h.app.Jobs(context.Background(), ingest.Filter{})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("got %d jobs (%v), want 1", len(jobs), err)
	}
	v := h.waitTerminal(t, res[0].job(t).ID)
	if v.Status != string(ingest.Succeeded) || v.Lines.Imported != 100 {
		t.Fatalf("job: %s %+v", v.Status, v.Lines)
	}
	checkChunks(t, h.app, v, 100)
}

func testValidation(t *testing.T, b backend) {
	q, _ := b.open(t)
	h := newHarness(t, q, &ingest.Config{MaxFileBytes: 4096}, true)
	header := strings.Join(ingest.Columns, ",")
	cases := []struct {
		name, ctype, body string
		code              int
		line              int
		field             string
	}{
		{"unknown column", "text/csv", header + ",colour\nA,1,S,1,2026-01-01,FH01,red\n", 422, 1, "colour"},
		{"missing column", "text/csv", "advice_id,line_no\nA,1\n", 422, 1, "sku"},
		{"bad date", "text/csv", header + "\nA,1,S,1,2026-01-01,FH01\nA,2,S,1,2026-13-45,FH01\n", 422, 3, "expected_date"},
		{"bad quantity", "text/csv", header + "\nA,1,S,-4,2026-01-01,FH01\n", 422, 2, "quantity"},
		{"over-long sku", "text/csv", header + "\nA,1," + strings.Repeat("S", ingest.MaxFieldBytes+1) + ",1,2026-01-01,FH01\n", 422, 2, "sku"},
		{"empty file", "text/csv", "", 422, 0, ""},
		{"header only", "text/csv", header + "\n", 422, 0, ""},
		{"json unknown field", "application/json", `[{"advice_id":"A","line_no":1,"sku":"S","quantity":2,"expected_date":"2026-01-01","depot":"FH01","colour":"red"}]`, 422, 1, "colour"},
		{"json bad date", "application/json", `[{"advice_id":"A","line_no":1,"sku":"S","quantity":2,"expected_date":"01/02/2026","depot":"FH01"}]`, 422, 1, "expected_date"},
		{"wrong content type", "application/pdf", "%PDF", 415, 0, "Content-Type"},
		{"not utf-8", "text/csv", header + "\nA,1,S,1,2026-01-01,FH01\nA,2,S\xff,1,2026-01-01,FH01\n", 422, 3, "encoding"},
		{"json not utf-8", "application/json", "[\n{\"advice_id\":\"A\xc3\"}]", 422, 2, "encoding"},
		{"too large", "text/csv", header + "\n" + strings.Repeat("A,1,S,1,2026-01-01,FH01\n", 400), 413, 0, "file"},
	}
	for _, c := range cases {
		r := h.do(t, "POST", "/imports?supplier=ACME", c.ctype, []byte(c.body))
		var eb ingest.ErrorBody
		if err := json.Unmarshal(r.body, &eb); err != nil {
			t.Fatalf("%s: body %s is not JSON: %v", c.name, r.body, err)
		}
		if r.code != c.code || len(eb.Problems) == 0 || eb.Problems[0].Line != c.line || eb.Problems[0].Field != c.field {
			t.Errorf("%s: got %d %s, want %d naming line %d field %q", c.name, r.code, r.body, c.code, c.line, c.field)
		}
	}
	if r := h.do(t, "POST", "/imports", "text/csv", makeCSV(3, "x", nil)); r.code != 400 {
		t.Errorf("no supplier: got %d %s, want 400", r.code, r.body)
	}
	if jobs, err := h.app.Jobs(context.Background(), ingest.Filter{}); err != nil || len(jobs) != 0 {
		t.Fatalf("rejected uploads created %d jobs (%v)", len(jobs), err)
	}
}

func testPartialThenRequeue(t *testing.T, b backend) {
	q, _ := b.open(t)
	depots := ingest.NewDepots(ingest.DefaultDepots...)
	h := newHarness(t, q, &ingest.Config{ChunkSize: 10, Depots: depots}, true)
	// 100 lines in 10 chunks; chunk 3 has two lines for depot FH99, chunk 7 one.
	bad := func(i int) bool { return i == 31 || i == 38 || i == 75 }
	r := h.upload(t, "ACME", makeCSV(100, "partial", bad))
	if r.code != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.code, r.body)
	}
	id := r.job(t).ID
	v := h.waitTerminal(t, id)
	if v.Status != string(ingest.PartiallySucceeded) {
		t.Fatalf("status %s, want PartiallySucceeded", v.Status)
	}
	if v.Lines != (ingest.Counts{Total: 100, Imported: 80, Failed: 20}) || v.Chunks != (ingest.Counts{Total: 10, Imported: 8, Failed: 2}) {
		t.Fatalf("counts: lines %+v chunks %+v", v.Lines, v.Chunks)
	}
	if fmt.Sprint(v.FailedChunks) != "[3 7]" {
		t.Fatalf("failed chunks %v, want [3 7]", v.FailedChunks)
	}
	if ps := v.ChunkResults[3].Problems; len(ps) != 2 || ps[0].Line != 33 || ps[0].Field != "depot" {
		t.Fatalf("chunk 3 problems: %+v (want rows 33 and 40, field depot)", ps)
	}
	checkChunks(t, h.app, v, 80)

	// Requeue without fixing anything: the same chunks fail again.
	if r := h.do(t, "POST", "/imports/"+id+"/requeue", "", nil); r.code != http.StatusAccepted {
		t.Fatalf("requeue: %d %s", r.code, r.body)
	}
	v = h.waitJob(t, id, "the first requeue to finish", func(v *ingest.JobView) bool { return v.Generation == 1 && ingest.IsTerminal(v.Status) })
	if v.Status != string(ingest.PartiallySucceeded) || v.ChunkResults[3].Attempt != 2 || v.ChunkResults[0].Attempt != 1 {
		t.Fatalf("after a requeue with nothing fixed: %s, chunk 3 attempt %d, chunk 0 attempt %d", v.Status, v.ChunkResults[3].Attempt, v.ChunkResults[0].Attempt)
	}

	// Onboard the depot and requeue: only chunks 3 and 7 run, once more.
	depots.Add("FH99")
	if r := h.do(t, "POST", "/imports/"+id+"/requeue", "", nil); r.code != http.StatusAccepted {
		t.Fatalf("requeue: %d %s", r.code, r.body)
	}
	v = h.waitJob(t, id, "the second requeue to finish", func(v *ingest.JobView) bool { return v.Generation == 2 && ingest.IsTerminal(v.Status) })
	if v.Status != string(ingest.Succeeded) || v.Lines.Imported != 100 {
		t.Fatalf("after onboarding: %s %+v", v.Status, v.Lines)
	}
	for _, c := range v.ChunkResults {
		want := 1
		if c.Index == 3 || c.Index == 7 {
			want = 3
		}
		if c.Attempt != want {
			t.Errorf("chunk %d ran %d times, want %d", c.Index, c.Attempt, want)
		}
	}
	checkChunks(t, h.app, v, 100)
	if r := h.do(t, "POST", "/imports/"+id+"/requeue", "", nil); r.code != http.StatusConflict {
		t.Fatalf("requeue of a Succeeded job: got %d %s, want 409", r.code, r.body)
	}
}

func testTransientRetry(t *testing.T, b backend) {
	q, _ := b.open(t)
	var calls atomic.Int32
	fault := func(_ string, chunk, _ int) error {
		if chunk == 1 && calls.Add(1) <= 2 {
			return idem.RetryAfter(10*time.Millisecond, errors.New("warehouse system unavailable"))
		}
		return nil
	}
	h := newHarness(t, q, &ingest.Config{ChunkSize: 10, Rules: ingest.DepotRules(ingest.NewDepots(ingest.DefaultDepots...), fault)}, true)
	r := h.upload(t, "ACME", makeCSV(30, "transient", nil))
	if r.code != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.code, r.body)
	}
	v := h.waitTerminal(t, r.job(t).ID)
	if v.Status != string(ingest.Succeeded) || calls.Load() != 3 {
		t.Fatalf("got %s after %d runs of chunk 1, want Succeeded after 3", v.Status, calls.Load())
	}
	checkChunks(t, h.app, v, 30)
}

// A file just under the size limit made of characters that JSON escapes to
// six bytes (<, >, &) is imported: the upload message carries the file in a
// form whose size is bounded by the limit (base64), so it is never
// dead-lettered as oversized, and the saga imports the very bytes hashed.
func testEscapeHeavyFileAtLimit(t *testing.T, b backend) {
	q, _ := b.open(t)
	const limit = 256 << 10
	// Chunks of 2,000 such lines (about 1 MB as JSON, over the base64
	// bound of the file itself) are the largest messages the import emits.
	h := newHarness(t, q, &ingest.Config{MaxFileBytes: limit, ChunkSize: 2000}, true)
	var file bytes.Buffer
	file.WriteString(strings.Join(ingest.Columns, ",") + "\n")
	sku := strings.Repeat("<&>", ingest.MaxFieldBytes/3)
	for i := 0; ; i++ {
		line := fmt.Sprintf("ADV-%d,1,%s,1,2026-03-01,FH01\n", i, sku)
		if file.Len()+len(line) > limit {
			break
		}
		file.WriteString(line)
	}
	r := h.upload(t, "ACME", file.Bytes())
	if r.code != http.StatusCreated {
		t.Fatalf("upload of %d bytes: got %d %s, want 201", file.Len(), r.code, r.body)
	}
	v := h.waitTerminal(t, r.job(t).ID)
	if v.Status != "Succeeded" || v.Size != file.Len() {
		t.Fatalf("job %s of %d bytes, want Succeeded with %d bytes", v.Status, v.Size, file.Len())
	}
	if dls, err := q.ListDeadLetters(context.Background(), nil); err != nil || len(dls) != 0 {
		t.Fatalf("dead letters %v (%v), want none", dls, err)
	}
}

// Store failures answer 503 (retry later), not 4xx; an id that cannot be a
// job's is a 404.
func testStoreFailure(t *testing.T, b backend) {
	q, _ := b.open(t)
	h := newHarness(t, q, nil, false)
	if r := h.do(t, "GET", "/imports/"+strings.Repeat("x", 300), "", nil); r.code != http.StatusNotFound {
		t.Errorf("GET of an impossible id: got %d %s, want 404", r.code, r.body)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	id := ingest.IdempotencyKey([]byte("x"), "ACME")
	if r := h.do(t, "GET", "/imports/"+id, "", nil); r.code != http.StatusServiceUnavailable {
		t.Errorf("GET with the store closed: got %d %s, want 503", r.code, r.body)
	}
	if r := h.do(t, "POST", "/imports/"+id+"/requeue", "", nil); r.code != http.StatusServiceUnavailable {
		t.Errorf("requeue with the store closed: got %d %s, want 503", r.code, r.body)
	}
}

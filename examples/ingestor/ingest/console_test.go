package ingest_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/examples/ingestor/ingest"
	"github.com/idemhq/idem/store/sqlitestore"
)

// The console is served beside the API: after an import, its overview
// counts the job saga and its instances page lists the job by its key.
func TestConsoleBesideAPI(t *testing.T) {
	q, err := sqlitestore.Open(context.Background(), t.TempDir()+"/ingestor.db", &sqlitestore.Config{PollInterval: 20 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	h := newHarness(t, q, &ingest.Config{ChunkSize: 4}, true)
	mux, err := h.app.ServeMux(nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	h.srv = srv // the API through the same mux as the console

	r := h.upload(t, "ACME", makeCSV(10, "console", func(i int) bool { return i == 9 }))
	if r.code != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.code, r.body)
	}
	job := r.job(t)
	h.waitTerminal(t, job.ID)

	overview := get(t, srv.URL+"/console/")
	for _, want := range []string{"ingestor.job", "ingestor.chunk", `href="/console/instances`} {
		if !strings.Contains(overview, want) {
			t.Errorf("the console overview does not show %q", want)
		}
	}
	jobs := get(t, srv.URL+"/console/instances?type=ingestor.job")
	if !strings.Contains(jobs, job.ID) {
		t.Errorf("the console's job list does not show job %s", job.ID)
	}
	if !strings.Contains(jobs, "PartiallySucceeded") {
		t.Errorf("the console's job list does not show the job's state PartiallySucceeded")
	}
	if api := get(t, srv.URL+"/imports/"+job.ID); !strings.Contains(api, job.ID) {
		t.Errorf("the API beside the console does not answer for job %s", job.ID)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, b)
	}
	return string(b)
}

package cli

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer written by the server's goroutines and
// read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func httpGet(t *testing.T, url string) (int, string, error) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestServeAnswersAndStopsCleanly(t *testing.T) {
	t.Parallel()
	checkServe(t)
}

// The same with an embedded NATS JetStream server as the transport: the
// message goes through the broker, the emitted ones through the outbox.
func TestServeOnEmbeddedNATS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	checkServe(t, "--transport", transportEmbedded, "--data-dir", dir)
	if _, err := os.Stat(filepath.Join(dir, "nats", "jetstream")); err != nil {
		t.Errorf("no JetStream files under --data-dir: %v", err)
	}
}

// checkServe runs idem serve on a fresh SQLite store with extra flags,
// submits an order through the admin API, waits for its saga, reads
// /metrics and stops the server.
func checkServe(t *testing.T, extra ...string) {
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb lockedBuffer
	exited := make(chan int, 1)
	args := append([]string{"serve", "--store", "sqlite://" + filepath.Join(t.TempDir(), "idem.db"), "--addr", addr}, extra...)
	go func() {
		exited <- Run(ctx, args, &out, &errb)
	}()
	base := "http://" + addr
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, _, err := httpGet(t, base+"/healthz")
		if err == nil && code == 200 {
			break
		}
		select {
		case c := <-exited:
			t.Fatalf("serve exited with %d before answering /healthz; stderr:\n%s", c, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz did not answer 200 in time (last: %d, %v); stderr:\n%s", code, err, errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body, err := httpGet(t, base+"/readyz"); err != nil || code != 200 {
		t.Errorf("/readyz: %d %s %v; want 200", code, body, err)
	}

	resp, err := http.Post(base+"/api/messages", "application/json",
		strings.NewReader(`{"id": "m-1", "type": "orders.OrderPlaced", "body": {"OrderID": "o-1", "Items": 1}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit: status %d, want 202", resp.StatusCode)
	}
	for {
		_, body, err := httpGet(t, base+"/api/sagas?type=order")
		if err == nil && strings.Contains(body, `"key":"o-1"`) && strings.Contains(body, "AwaitingPayment") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("saga order/o-1 did not appear: %s %v", body, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The saga is visible once committed; the metrics are recorded when
	// the batch settles, just after: wait for them too.
	wantMetrics := []string{`idem_messages_total{result="applied"} 1`, "idem_unit_of_work_seconds_count 1", "idem_outbox_backlog"}
	for {
		code, metrics, err := httpGet(t, base+"/metrics")
		missing := ""
		for _, want := range wantMetrics {
			if !strings.Contains(metrics, want) {
				missing = want
			}
		}
		if err == nil && code == 200 && missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics: status %d (%v), want a line with %q in:\n%s", code, err, missing, metrics)
		}
		time.Sleep(20 * time.Millisecond)
	}

	cancel()
	select {
	case c := <-exited:
		if c != 0 {
			t.Fatalf("serve exited with %d after cancel, want 0; stderr:\n%s", c, errb.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not exit after its context was cancelled")
	}
}

func TestServeRefusesBadConfiguration(t *testing.T) {
	// Not parallel: it sets IDEM_ADMIN_TOKEN.
	t.Setenv("IDEM_ADMIN_TOKEN", "")
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	dir := t.TempDir()
	db := "sqlite://" + filepath.Join(dir, "idem.db")
	empty := filepath.Join(dir, "empty-token")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"port in use", []string{"--store", db, "--addr", held.Addr().String()}, "is in use: pass --addr"},
		{"any address without a token", []string{"--store", db, "--addr", "0.0.0.0:0"}, "set IDEM_ADMIN_TOKEN"},
		{"a host name without a token", []string{"--store", db, "--addr", "example.com:8080"}, "set IDEM_ADMIN_TOKEN"},
		{"an empty token file", []string{"--store", db, "--addr", "0.0.0.0:0", "--token-file", empty}, "is empty"},
		{"addr without a port", []string{"--store", db, "--addr", "127.0.0.1"}, "not host:port"},
		{"unknown store scheme", []string{"--store", "mysql://root:hunter2@db/idem", "--addr", "127.0.0.1:0"}, "unsupported store"},
		{"unwritable store path", []string{"--store", "sqlite://" + filepath.Join(dir, "missing", "dir", "idem.db"), "--addr", "127.0.0.1:0"}, "does not exist: create it"},
		{"negative body limit", []string{"--store", db, "--addr", "127.0.0.1:0", "--max-body", "-1"}, "--max-body"},
		{"zero stream replicas", []string{"--store", db, "--addr", "127.0.0.1:0", "--transport", transportEmbedded, "--data-dir", dir, "--nats-replicas", "0"}, "must be a positive number"},
		{"three stream replicas on one server", []string{"--store", db, "--addr", "127.0.0.1:0", "--transport", transportEmbedded, "--data-dir", dir, "--nats-replicas", "3"}, "Replicas"},
		{"unknown transport", []string{"--store", db, "--addr", "127.0.0.1:0", "--transport", "sqs://k:9092"}, "unsupported transport"},
	} {
		code, _, errOut := run(t, append([]string{"serve"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", tc.name, code, errOut, tc.want)
		}
		if strings.Contains(errOut, "hunter2") {
			t.Errorf("%s: stderr shows the password: %q", tc.name, errOut)
		}
	}
}

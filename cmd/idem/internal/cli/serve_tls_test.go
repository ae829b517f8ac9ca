package cli

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files
// and returns their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "idem test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pool
}

// TestServeRefusesPlainHTTPBeyondLoopback: with a token, an address other
// machines can reach must be served over TLS, or the operator must say
// that plain HTTP is wanted (a TLS proxy in front).
func TestServeRefusesPlainHTTPBeyondLoopback(t *testing.T) {
	// Not parallel: it sets IDEM_ADMIN_TOKEN.
	t.Setenv("IDEM_ADMIN_TOKEN", "tls-test-admin-token")
	db := "sqlite://" + filepath.Join(t.TempDir(), "idem.db")
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a server that starts anyway stops at once
	var out, errb lockedBuffer
	code := Run(ctx, []string{"serve", "--store", db, "--addr", "0.0.0.0:0"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "--tls-cert") || !strings.Contains(errb.String(), "--insecure-http") {
		t.Errorf("serve on 0.0.0.0 over plain HTTP with a token: exit %d, stderr %q; want 2 naming --tls-cert and --insecure-http", code, errb.String())
	}
	certFile, _, _ := selfSigned(t)
	errb = lockedBuffer{}
	code = Run(ctx, []string{"serve", "--store", db, "--addr", "127.0.0.1:0", "--tls-cert", certFile}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "--tls-key") {
		t.Errorf("serve with --tls-cert alone: exit %d, stderr %q; want 2 naming --tls-key", code, errb.String())
	}
}

// TestServeOverTLS serves on every address with --tls-cert and
// --tls-key: the API answers over HTTPS and the session cookie is Secure.
func TestServeOverTLS(t *testing.T) {
	// Not parallel: it sets IDEM_ADMIN_TOKEN.
	t.Setenv("IDEM_ADMIN_TOKEN", "tls-test-admin-token")
	certFile, keyFile, pool := selfSigned(t)
	_, port, err := net.SplitHostPort(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb lockedBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- Run(ctx, []string{"serve", "--store", "sqlite://" + filepath.Join(t.TempDir(), "idem.db"),
			"--addr", "0.0.0.0:" + port, "--tls-cert", certFile, "--tls-key", keyFile}, &out, &errb)
	}()
	client := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	base := "https://127.0.0.1:" + port
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case c := <-exited:
			t.Fatalf("serve exited with %d before answering /healthz over TLS; stderr:\n%s", c, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz did not answer over TLS (last error %v); stderr:\n%s", err, errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/api/sagas", nil)
	req.Header.Set("Authorization", "Bearer tls-test-admin-token")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /api/sagas over TLS with the token: status %d, want 200", resp.StatusCode)
	}
	req, _ = http.NewRequest(http.MethodPost, base+"/login", strings.NewReader(url.Values{"token": {"tls-test-admin-token"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	if resp, err = client.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if c := resp.Header.Get("Set-Cookie"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(c, "idem_session=") || !strings.Contains(c, "Secure") {
		t.Errorf("login over TLS: status %d, cookie %q; want 303 and a Secure session cookie", resp.StatusCode, c)
	}
	if plain, err := http.Get("http://127.0.0.1:" + port + "/healthz"); err == nil {
		plain.Body.Close()
		if plain.StatusCode == http.StatusOK {
			t.Error("the TLS port answered plain HTTP with 200")
		}
	}
	if !strings.Contains(errb.String(), "https://") {
		t.Errorf("the start-up log does not give an https:// URL:\n%s", errb.String())
	}
	cancel()
	select {
	case c := <-exited:
		if c != 0 {
			t.Errorf("serve exited with %d after cancel, want 0; stderr:\n%s", c, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit after its context was cancelled")
	}
}

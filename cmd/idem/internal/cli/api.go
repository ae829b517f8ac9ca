package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/admin"
)

// The environment the API commands read: the admin API's address, and
// its bearer token (never a flag, which ps and shell history would show).
const (
	envAPIURL     = "IDEM_API_URL"
	envAdminToken = "IDEM_ADMIN_TOKEN"
)

// apiHelp ends the Long text of every command that goes through the
// running engine's admin API.
const apiHelp = `
This command needs the running engine (its transport and its registered
sagas), so it goes through the engine's admin API (idem serve, or
admin.New in your program) rather than the store: --api names it as
http(s)://host:port[/prefix] (default IDEM_API_URL). The token, when the
API requires one, comes from IDEM_ADMIN_TOKEN only, never from a flag; it is
sent as "Authorization: Bearer ..." and never printed. The journal records
the command as "api: cli: user@host".

Exit status: 0 done; 2 the API refused the request (a 4xx answer: a wrong
token, a bad argument, a conflict), or bad flags, or no --api; 1 the API
failed (a 5xx answer) or could not be reached.`

// apiFlags are the flags of a command that calls the admin API.
type apiFlags struct {
	url     string
	timeout time.Duration
}

func (f *apiFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "api", "", "the admin API's address, http(s)://host:port[/prefix] (default "+envAPIURL+")")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 30*time.Second, "give up on the API after this long")
}

// apiClient calls the admin API of a running engine.
type apiClient struct {
	base    *url.URL
	token   string
	timeout time.Duration
	http    *http.Client
}

// client reads the API's address and token: a usage error (exit 2)
// names both the flag and the variable when neither gives an address.
func (f *apiFlags) client() (*apiClient, error) {
	raw := cmp.Or(f.url, os.Getenv(envAPIURL))
	if raw == "" {
		return nil, usageErrorf("no admin API to call: give --api http://host:port, or set %s", envAPIURL)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, usageErrorf("--api %s is not a URL: %v", clean(raw), errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return nil, usageErrorf("--api %s: want http://host:port or https://host:port", clean(raw))
	case u.User != nil:
		return nil, usageErrorf("--api: the URL holds credentials: drop them and put the token in %s", envAdminToken)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, usageErrorf("--api %s: the address takes no query or fragment", clean(u.Redacted()))
	}
	if f.timeout <= 0 {
		return nil, usageErrorf("--timeout %s: want a positive duration", f.timeout)
	}
	u.Path, u.RawPath = strings.TrimSuffix(u.Path, "/"), strings.TrimSuffix(u.RawPath, "/")
	return &apiClient{base: u, token: os.Getenv(envAdminToken), timeout: f.timeout, http: &http.Client{
		// A redirect would be followed without the token, or with it to
		// another place: say where it leads instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// apiCall is one request: path is escaped already ("/api/sagas/" +
// url.PathEscape(type) + ...).
type apiCall struct {
	method string
	path   string
	query  url.Values
	body   any
}

// do sends c and decodes a 2xx answer into out (when not nil). Every
// other answer is an error carrying the API's own message: exit 2 for a
// 4xx, 1 for a 5xx or a failed connection.
func (a *apiClient) do(ctx context.Context, c *apiCall, out any) error {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	req, err := a.request(ctx, c)
	if err != nil {
		return err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		var ue *url.Error // its text repeats the method and the URL
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return failed(fmt.Errorf("%s %s: %w", c.method, a.where(c), a.scrub(err)))
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return failed(fmt.Errorf("%s %s: read the answer: %w", c.method, a.where(c), err))
	}
	if resp.StatusCode >= 300 {
		return a.refusal(c, resp, text)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(text, out); err != nil {
		return failed(fmt.Errorf("%s %s: the answer is not the JSON expected (%v): is --api the admin API's address?", c.method, a.where(c), err))
	}
	return nil
}

func (a *apiClient) request(ctx context.Context, c *apiCall) (*http.Request, error) {
	var body io.Reader
	if c.body != nil {
		b, err := json.Marshal(c.body)
		if err != nil {
			return nil, fmt.Errorf("encode the request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	u := *a.base
	u.RawPath = a.base.EscapedPath() + c.path
	var err error
	if u.Path, err = url.PathUnescape(u.RawPath); err != nil {
		return nil, fmt.Errorf("request path %q: %w", c.path, err)
	}
	u.RawQuery = c.query.Encode()
	req, err := http.NewRequestWithContext(ctx, c.method, u.String(), body)
	if err != nil {
		return nil, usageErrorf("--api: %v", err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	if who := cliActor(); len(who) <= 100 && utf8.ValidString(who) && !strings.ContainsFunc(who, func(r rune) bool { return !unicode.IsPrint(r) }) {
		req.Header.Set(admin.ActorHeader, who)
	}
	return req, nil
}

// refusal is the error of an answer that is no success: the API's own
// message (its {"error": "..."}), or the status alone.
func (a *apiClient) refusal(c *apiCall, resp *http.Response, text []byte) error {
	var e struct {
		Error string `json:"error"`
	}
	msg := resp.Status
	switch {
	case resp.StatusCode < 400:
		msg += ": a redirect to " + clean(resp.Header.Get("Location")) + ": give --api the address it leads to"
	case json.Unmarshal(text, &e) == nil && e.Error != "":
		msg += ": " + clean(e.Error)
	}
	err := fmt.Errorf("the admin API answered %s %s with %s", c.method, a.where(c), a.scrub(errors.New(msg)))
	if resp.StatusCode >= 500 {
		return failed(err)
	}
	return &exitError{code: 2, err: err}
}

// where is the call's address as it may be printed.
func (a *apiClient) where(c *apiCall) string {
	return clean(a.base.Redacted() + c.path)
}

// notSent reports whether err is a request that never reached the API:
// no connection was made, so nothing was sent.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// scrub removes the token from an error's text, should anything echo it.
func (a *apiClient) scrub(err error) error {
	if a.token == "" || !strings.Contains(err.Error(), a.token) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), a.token, "***"))
}

// pathSegment escapes s as one segment of a request path. A segment of
// dots alone is escaped too: the server would otherwise clean "/order/../"
// away and redirect.
func pathSegment(s string) string {
	if s == "." || s == ".." {
		return strings.ReplaceAll(s, ".", "%2E")
	}
	return url.PathEscape(s)
}

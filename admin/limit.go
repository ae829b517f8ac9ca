package admin

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Failed logins (a wrong token on the console's form or in an API
// request's Authorization header) are limited by two token buckets: one
// per client address (an IPv6 address counts by its /64), one for all
// clients together. A wrong token takes one from each.
//
// A client whose own bucket is empty is answered 429 with Retry-After for
// every token it sends, the right one too: otherwise a guesser ignoring the
// 429s would still learn which guess was right. The global bucket refuses
// only clients that have failed recently (their own bucket is not full):
// many guessing addresses then get about one guess each, and a client
// with a clean history (the operator, Prometheus) is never locked out by
// others. Requests without a token, and console sessions, cost nothing.
const (
	clientBurst = 10              // failures a client may make at once
	clientEvery = 6 * time.Second // then one more every 6 s (10 a minute)
	globalBurst = 100
	globalEvery = 500 * time.Millisecond // all clients: 2 a second
	maxClients  = 10_000
)

// bucket is a token bucket: burst tokens, one more every every.
type bucket struct {
	tokens float64
	at     time.Time
	warned time.Time
}

// fill brings b up to now and returns it.
func (b *bucket) fill(now time.Time, burst int, every time.Duration) *bucket {
	if b.at.IsZero() {
		b.tokens = float64(burst)
	} else if d := now.Sub(b.at); d > 0 {
		b.tokens = math.Min(float64(burst), b.tokens+float64(d)/float64(every))
	}
	b.at = now
	return b
}

// wait is how long until b holds a whole token: 0 when it does.
func (b *bucket) wait(every time.Duration) time.Duration {
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(every))
}

// loginLimiter holds the buckets; safe for concurrent use.
type loginLimiter struct {
	mu      sync.Mutex
	global  bucket
	clients map[string]*bucket
	// others is the bucket of the addresses clients has no room for: they
	// share it rather than each escaping the per-client limit.
	others bucket
	swept  time.Time // when clients was last swept of refilled buckets
	max    int       // addresses clients may hold
}

func newLoginLimiter() *loginLimiter {
	return &loginLimiter{clients: map[string]*bucket{}, max: maxClients}
}

// client returns the bucket of addr. A new address gets its own when
// clients has room, after forgetting (at most once a second) the clients
// whose buckets have refilled; otherwise it shares others. Call with mu
// held.
func (l *loginLimiter) client(addr string, now time.Time) *bucket {
	b := l.clients[addr]
	if b == nil && len(l.clients) >= l.max && now.Sub(l.swept) >= time.Second {
		l.swept = now
		for a, c := range l.clients {
			if c.fill(now, clientBurst, clientEvery).tokens >= clientBurst {
				delete(l.clients, a)
			}
		}
	}
	if b == nil && len(l.clients) < l.max {
		b = &bucket{}
		l.clients[addr] = b
	}
	if b == nil {
		b = &l.others
	}
	return b.fill(now, clientBurst, clientEvery)
}

// refused reports how long addr must wait before a token it sends is
// looked at: 0 when it may try now. The second result says whether this
// refusal is the first of the client's spell, which is worth a log line.
func (l *loginLimiter) refused(addr string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.known(addr, now)
	if c == nil {
		return 0, false // a clean history
	}
	d := c.wait(clientEvery)
	if c.tokens < clientBurst {
		d = max(d, l.global.fill(now, globalBurst, globalEvery).wait(globalEvery))
	}
	if d == 0 {
		return 0, false
	}
	first := now.Sub(c.warned) >= clientBurst*clientEvery
	if first {
		c.warned = now
	}
	return d, first
}

// known is addr's bucket, filled up to now, or nil when addr has none (no
// recent failure). Call with mu held.
func (l *loginLimiter) known(addr string, now time.Time) *bucket {
	b := l.clients[addr]
	if b == nil && len(l.clients) >= l.max && l.others.at != (time.Time{}) {
		b = &l.others
	}
	if b == nil {
		return nil
	}
	return b.fill(now, clientBurst, clientEvery)
}

// failed records a wrong token from addr: it takes a token from addr's
// bucket and from the global one.
func (l *loginLimiter) failed(addr string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range []*bucket{l.client(addr, now), l.global.fill(now, globalBurst, globalEvery)} {
		b.tokens = math.Max(0, b.tokens-1)
	}
}

// clientAddr is the address r came from, an IPv6 one cut to its /64 (one
// host usually holds a whole /64). Behind a proxy it is the proxy's.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() != nil {
		return host
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// limited sets Retry-After and returns the seconds to wait, and true,
// when r's client may not try a token now (see refused); the caller then
// answers 429. Call it before looking at the token.
func (p *parts) limited(w http.ResponseWriter, r *http.Request) (int, bool) {
	addr := clientAddr(r)
	d, first := p.sessions.limit.refused(addr, p.sessions.now())
	if d == 0 {
		return 0, false
	}
	secs := int(math.Ceil(d.Seconds()))
	if first {
		p.log.WarnContext(r.Context(), "admin: login refused: too many wrong admin tokens; answering this client 429 for a while", "client", addr, "path", r.URL.Path, "retry_after_seconds", secs)
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	return secs, true
}

// wrongToken records a wrong token from r's client, and logs it without
// the token.
func (p *parts) wrongToken(r *http.Request) {
	addr := clientAddr(r)
	p.sessions.limit.failed(addr, p.sessions.now())
	p.log.WarnContext(r.Context(), "admin: login failed: wrong admin token", "client", addr, "path", r.URL.Path)
}

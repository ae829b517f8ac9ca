// Package silentproxy is a TCP proxy for tests that cuts a link the way a
// network partition does: once muted it forwards nothing in either
// direction, yet keeps every socket open, so that neither end sees a
// reset or an end of stream and each waits for the other.
//
// A user-space proxy keeps its kernel's sockets alive: the server's TCP
// keepalive probes are answered by the proxy's kernel, so a muted proxy
// shows what an application-level bound does, not what TCP keepalives do.
package silentproxy

import (
	"net"
	"sync"
)

// Cutter decides, for each chunk p the client sends while the proxy is
// not muted, what to forward (it may hold bytes back and forward them with
// a later chunk) and whether to go silent after that. It runs under the
// proxy's lock, on the reading goroutine of the connection that sent p.
type Cutter func(p []byte) (forward []byte, mute bool)

// Proxy forwards TCP connections to a target until muted.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	muted  bool
	cutter Cutter
	sent   chan struct{} // closed when the client sends after Mute
	conns  []net.Conn
	closed bool
}

// New starts a proxy to target on a free port of 127.0.0.1.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, sent: make(chan struct{})}
	go p.serve()
	return p, nil
}

// Addr returns the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Mute stops forwarding in both directions, on every connection, now and
// later: what either end sends is read and dropped.
func (p *Proxy) Mute() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.muted = true
}

// CutWith arms c: from now on, what clients send passes through c until
// it says to mute. Set it while the client is idle between requests, so
// that the next chunk starts at a message boundary.
func (p *Proxy) CutWith(c Cutter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutter = c
}

// SentWhileMuted returns a channel closed once a client has sent bytes
// that the muted proxy dropped: a request is waiting on the silent link.
func (p *Proxy) SentWhileMuted() <-chan struct{} { return p.sent }

// Close closes the listener and every connection.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	return err
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.copy(s, c, true)
		go p.copy(c, s, false)
	}
}

// copy forwards from src to dst until muted, then reads and drops; up is
// the client-to-server direction.
func (p *Proxy) copy(dst, src net.Conn, up bool) {
	defer dst.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if werr := p.forward(dst, buf[:n], up); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) forward(dst net.Conn, b []byte, up bool) error {
	p.mu.Lock()
	muted, cutter := p.muted, p.cutter
	if up && !muted && cutter != nil {
		out, mute := cutter(b)
		b = out
		if mute {
			p.muted = true
		}
	} else if muted {
		b = nil
		if up {
			select {
			case <-p.sent:
			default:
				close(p.sent)
			}
		}
	}
	p.mu.Unlock()
	if len(b) == 0 {
		return nil
	}
	_, err := dst.Write(b)
	return err
}

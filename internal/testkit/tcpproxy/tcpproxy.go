// Package tcpproxy is a loopback TCP proxy for fault-injection tests: it
// forwards connections to a server and can cut them, refuse new ones, or
// swallow the server's replies while the requests still get through.
package tcpproxy

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards connections from its own loopback address to a target.
// Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	refuse  bool // close new connections at once
	swallow bool // drop bytes from the server
}

// Start starts a proxy to target on a free loopback port. It is closed, and
// its goroutines have exited, when t ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tcpproxy: listen: %v", err)
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr returns the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every open connection, both sides. New connections are
// forwarded as usual unless Refuse is on.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns { // nil once closed
		c.Close()
	}
}

// Refuse sets whether new connections are closed as soon as they are
// accepted (true), or forwarded (false).
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = on
}

// Swallow sets whether bytes from the server are dropped (true) instead of
// passed on (false). Requests still reach the server: a client sees its
// requests applied but never answered.
func (p *Proxy) Swallow(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.swallow = on
}

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns = nil // track refuses from now on
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			client.Close()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			client.Close()
			server.Close()
			return
		}
		p.wg.Add(2)
		go p.pipe(server, client, false)
		go p.pipe(client, server, true)
	}
}

// track registers the connections; it reports false if the proxy is closed.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies from src to dst until either fails, then closes both.
// fromServer marks the direction that Swallow drops.
func (p *Proxy) pipe(dst, src net.Conn, fromServer bool) {
	defer p.wg.Done()
	defer func() {
		src.Close()
		dst.Close()
		p.mu.Lock()
		delete(p.conns, src) // no-op on the nil map of a closed proxy
		delete(p.conns, dst)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			drop := fromServer && p.swallow
			p.mu.Unlock()
			if !drop {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return // EOF, or a side was closed: close the other one too
		}
	}
}

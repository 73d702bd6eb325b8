// Package tcpproxy is a TCP forwarding proxy for tests that need a network
// partition between a client and a real server. It listens on a free
// loopback port and forwards every connection to its target until told to
// partition: from then on no byte passes in either direction, yet no
// connection is closed, so a client waits on a silent connection as it
// would behind a dead link.
package tcpproxy

import (
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards connections made to Addr to its target. It is safe for
// concurrent use.
type Proxy struct {
	listener    net.Listener
	target      string
	partitioned atomic.Bool

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Start returns a proxy listening on a free port of 127.0.0.1 that
// forwards each connection it accepts to target (host:port), dialled when
// the connection is accepted. Close stops it.
func Start(target string) (*Proxy, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{listener: listener, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the host:port clients connect to.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// Partition stops all forwarding, for good: every byte read after it
// returns, on connections open or opened later and in either direction,
// is dropped. Connections stay open; when one end closes its connection,
// the proxy still closes the other, so a server ends the session of a
// client that gave up.
func (p *Proxy) Partition() { p.partitioned.Store(true) }

// Close stops listening, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	err := p.listener.Close()
	p.mu.Lock()
	p.closed = true
	for conn := range p.conns {
		_ = conn.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// accept forwards each accepted connection until the listener closes.
func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client, server) {
			return
		}
		p.wg.Add(2)
		go p.pump(server, client)
		go p.pump(client, server)
	}
}

// track records conns for Close, or closes them and reports false if the
// proxy is already closed.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, conn := range conns {
			_ = conn.Close()
		}
		return false
	}
	for _, conn := range conns {
		p.conns[conn] = struct{}{}
	}
	return true
}

// pump copies what src sends to dst, dropping it once partitioned, until
// either end fails or closes; then it closes both.
func (p *Proxy) pump(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.partitioned.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	p.untrack(src, dst)
}

// untrack closes conns and forgets them.
func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, conn := range conns {
		_ = conn.Close()
		delete(p.conns, conn)
	}
}

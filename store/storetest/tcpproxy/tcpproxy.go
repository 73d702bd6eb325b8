// Package tcpproxy is a TCP forwarding proxy for tests that need a network
// partition or stall between a client and a real server.
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

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closed  bool
	stalled chan struct{} // while stalled: closed by Resume
	wg      sync.WaitGroup
}

// Start returns a proxy listening on a free port of 127.0.0.1 that
// forwards each connection it accepts to target (host:port). Close stops
// it.
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

// Partition drops, for good, every byte read from then on, in either
// direction. Connections stay open, so a client waits as behind a dead
// link; when one end closes, the proxy still closes the other.
func (p *Proxy) Partition() { p.partitioned.Store(true) }

// Stall holds every byte and every close read from then on, in either
// direction, until Resume passes them on in order. New connections are
// still accepted and dialled while stalled.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Resume ends a Stall, passing on what it held.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

// Conns reports how many client connections the proxy holds open.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// awaitFlow returns once the proxy is not stalled.
func (p *Proxy) awaitFlow() {
	p.mu.Lock()
	stalled := p.stalled
	p.mu.Unlock()
	if stalled != nil {
		<-stalled
	}
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	err := p.listener.Close()
	p.Resume()
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

// pump copies src to dst, through stalls and partitions, until either end
// fails or closes; then it closes both.
func (p *Proxy) pump(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.awaitFlow()
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

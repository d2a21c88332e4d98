package world

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// APIProxy is a TCP proxy in front of kube-apiserver that holds every byte
// it passes, in both directions, for a delay that can change at any time:
// API latency for a component whose kubeconfig points at it, and a watch
// that delivers late. TLS passes through untouched (the proxy listens on
// 127.0.0.1, which the serving certificate names). Close it when done.
type APIProxy struct {
	ln       net.Listener
	upstream string
	delay    atomic.Int64 // nanoseconds
	served   atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

// StartAPIProxy starts a proxy to the cluster's kube-apiserver on a free
// loopback port, with no delay.
func (w *World) StartAPIProxy() (*APIProxy, error) {
	u, err := url.Parse(w.Cluster.ServerURL())
	if err != nil {
		return nil, fmt.Errorf("the API server's URL: %w", err)
	}
	return StartTCPProxy(u.Host)
}

// StartTCPProxy starts a delaying proxy to upstream (host:port) on a free
// loopback port.
func StartTCPProxy(upstream string) (*APIProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the API proxy: %w", err)
	}
	p := &APIProxy{ln: ln, upstream: upstream, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	return p, nil
}

// URL is the proxy's https URL, for a kubeconfig's server.
func (p *APIProxy) URL() string { return "https://" + p.ln.Addr().String() }

// SetDelay holds every byte read from now on for d before it is passed on
// (0 passes bytes at once). Bytes already held keep their delay, so the
// stream's order never changes.
func (p *APIProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Served is how many connections the proxy has passed on: a component
// that talks through it opens at least one.
func (p *APIProxy) Served() int { return int(p.served.Load()) }

// Delay is the delay in force.
func (p *APIProxy) Delay() time.Duration { return time.Duration(p.delay.Load()) }

// PointKubeconfig rewrites the kubeconfig at path so that its server is the
// proxy; a component started (or restarted) with it then talks through the
// proxy.
func (p *APIProxy) PointKubeconfig(path, server string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading kubeconfig: %w", err)
	}
	if !strings.Contains(string(b), server) {
		return fmt.Errorf("kubeconfig %s does not name server %s", path, server)
	}
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(b), server, p.URL())), 0o600); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}

// Close stops listening, cuts every connection and waits for the copies.
func (p *APIProxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

func (p *APIProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// serve passes one client connection to a new upstream connection; when
// either side ends, both do (kube-apiserver restarting cuts its clients,
// as it would without the proxy).
func (p *APIProxy) serve(client net.Conn) {
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client, up) {
		return
	}
	p.served.Add(1)
	var both sync.WaitGroup
	both.Go(func() { p.pipe(up, client) })
	both.Go(func() { p.pipe(client, up) })
	both.Wait()
	p.untrack(client, up)
}

func (p *APIProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

func (p *APIProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// chunk is bytes read and when they may be passed on.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst, each chunk held until its due time; it closes
// both when either side fails.
func (p *APIProxy) pipe(dst, src net.Conn) {
	held := make(chan chunk, 1024)
	go func() {
		defer close(held)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				held <- chunk{data: buf[:n], due: time.Now().Add(p.Delay())}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range held {
		if wait := time.Until(c.due); wait > 0 {
			time.Sleep(wait) // the held byte's delay: what the proxy is for
		}
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	// Drain, so that the reader, its source closed, ends.
	for range held {
	}
}

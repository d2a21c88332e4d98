package world

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestAPIProxyDelaysBothWays: a byte through the proxy to an echo server
// comes back no sooner than twice the delay (held once each way), in
// order, and at once when the delay is taken off; a closed upstream ends
// the client's connection.
func TestAPIProxyDelaysBothWays(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	p, err := StartTCPProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const delay = 300 * time.Millisecond
	p.SetDelay(delay)
	start := time.Now()
	if _, err := c.Write([]byte("ab")); err != nil {
		t.Fatal(err)
	}
	got := readN(t, c, 2)
	if elapsed := time.Since(start); elapsed < 2*delay || string(got) != "ab" {
		t.Fatalf("echoed %q after %s; want \"ab\" no sooner than %s", got, elapsed, 2*delay)
	}

	if p.Served() != 1 {
		t.Errorf("Served = %d, want 1", p.Served())
	}
	p.SetDelay(0)
	if _, err := c.Write([]byte("c")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, c, 1); string(got) != "c" {
		t.Fatalf("echoed %q, want \"c\"", got)
	}

	// The upstream goes away (kube-apiserver killed): the proxy cuts the
	// client too, which then reads EOF or a reset within the deadline.
	_ = ln.Close()
	p.mu.Lock()
	for conn := range p.conns {
		if conn.RemoteAddr().String() == ln.Addr().String() {
			_ = conn.Close()
		}
	}
	p.mu.Unlock()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read after the upstream closed: %v; want the connection ended", err)
	}
}

func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, n)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("reading %d bytes through the proxy: %v", n, err)
	}
	return buf
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

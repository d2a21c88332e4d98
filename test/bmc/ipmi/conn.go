package ipmi

import (
	"net"
	"sync/atomic"
	"time"
)

// faultConn is the BMC's UDP socket with the network faults: an
// unreachable BMC drops every datagram unanswered, and latency delays every
// answer (each in its own handler goroutine, so answers overlap as on a
// slow BMC).
type faultConn struct {
	conn    *net.UDPConn
	faults  func() Faults
	done    chan struct{} // closed by Close: a delayed answer is dropped
	dropped atomic.Int64
}

// ReadFrom returns the next datagram the BMC answers.
func (c *faultConn) ReadFrom(buf []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.conn.ReadFrom(buf)
		if err != nil || !c.faults().Unreachable {
			return n, addr, err
		}
		c.dropped.Add(1)
	}
}

// WriteTo sends an answer after the configured latency.
func (c *faultConn) WriteTo(data []byte, addr net.Addr) (int, error) {
	if d := c.faults().Latency; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.done:
			return 0, net.ErrClosed
		}
	}
	if c.faults().Unreachable {
		c.dropped.Add(1)
		return len(data), nil
	}
	return c.conn.WriteTo(data, addr)
}

// Close stops listening.
func (c *faultConn) Close() error {
	close(c.done)
	return c.conn.Close()
}

// LocalAddr is the address the BMC listens on.
func (c *faultConn) LocalAddr() net.Addr { return c.conn.LocalAddr() }

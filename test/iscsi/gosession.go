package iscsi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"fenceline.io/fenceline/mock-driver/tgt/initiator"
)

// Device is a session to one LUN that reads and writes blocks: the
// libiscsi Session, or the pure-Go GoSession that needs no cgo.
type Device interface {
	BlockSize() int
	Write(lba uint32, data []byte) error
	Read(lba uint32, n int) ([]byte, error)
	Close() error
}

var (
	_ Device = (*Session)(nil)
	_ Device = (*GoSession)(nil)
)

// GoSession is an iSCSI session of the mock driver's pure-Go initiator:
// what the kubelet stand-in stages a tgt volume with, on any machine that
// runs tgtd (no libiscsi, no cgo). Like Session it never reconnects by
// itself. Safe for concurrent use (calls are serialised).
type GoSession struct {
	mu     sync.Mutex
	conn   *initiator.Conn
	bs     int
	blocks uint64
	opts   Options
}

// LoginGo logs in as opts say and, when opts.ReservationKey is set,
// registers that key, as a node on a volume fenced by reservations does
// at staging. session names the I_T nexus: a node's own sessions use "",
// a checker reading beside it another name (see initiator.LoginSession).
func LoginGo(ctx context.Context, opts Options, session string) (*GoSession, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := initiator.LoginSession(ctx, opts.Portal, opts.Target, opts.Initiator, session, opts.LUN, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("log in to %s as %s: %w", opts.Target, opts.Initiator, err)
	}
	s := &GoSession{conn: c, opts: opts}
	if s.blocks, s.bs, err = c.ReadCapacity(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("%s as %s: %w", opts.Target, opts.Initiator, err)
	}
	if opts.ReservationKey != 0 {
		if err := c.PROut(initiator.PRRegisterIgnoreKey, 0, 0, opts.ReservationKey); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("registering key %#x on %s as %s: %w", opts.ReservationKey, opts.Target, opts.Initiator, err)
		}
	}
	return s, nil
}

// BlockSize is the LUN's block size.
func (s *GoSession) BlockSize() int { return s.bs }

// Blocks is the LUN's size in blocks.
func (s *GoSession) Blocks() uint64 { return s.blocks }

// Write writes whole blocks at lba; nil means the target acknowledged it.
// A command the target refused is a *SCSIError.
func (s *GoSession) Write(lba uint32, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scsiError("write", lba, s.conn.Write(lba, data, s.bs))
}

// Read reads n blocks from lba.
func (s *GoSession) Read(lba uint32, n int) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.conn.Read(lba, n, s.bs)
	return b, s.scsiError("read", lba, err)
}

// Close logs out and closes the connection.
func (s *GoSession) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn.Close()
}

// scsiError gives a refused command the libiscsi Session's error type, so
// that callers judge both initiators' answers alike.
func (s *GoSession) scsiError(op string, lba uint32, err error) error {
	var se *initiator.StatusError
	if !errors.As(err, &se) {
		return err
	}
	return &SCSIError{Op: op, LBA: lba, Initiator: s.opts.Initiator, Status: int(se.Status), SenseKey: int(se.SenseKey),
		ASCQ: int(se.ASC)<<8 | int(se.ASCQ)}
}

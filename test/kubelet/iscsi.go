package kubelet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"fenceline.io/fenceline/mock-driver/tgt"
	"fenceline.io/fenceline/test/iscsi"
)

// LedgerKey names a volume's ledger in Config.Ledgers, "<driver>/<handle>":
// handles are a driver's own.
func LedgerKey(driver, handle string) string { return driver + "/" + handle }

// session is a node's iSCSI session to one volume, as its iscsid keeps
// it: logged in at staging, logged in again when the connection breaks (a
// restarted target, a dropped connection; a fenced node's new login is
// refused), logged out at clean-up or reboot. Safe for concurrent use.
type session struct {
	opts   iscsi.Options
	blocks uint64

	mu     sync.Mutex
	dev    iscsi.Device // nil while disconnected
	closed bool
}

// device returns the logged-in session, logging in again if it broke.
func (s *session) device(ctx context.Context) (iscsi.Device, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("session to %s logged out", s.opts.Target)
	}
	if s.dev == nil {
		dev, err := iscsi.LoginGo(ctx, s.opts, "")
		if err != nil {
			return nil, fmt.Errorf("reconnecting: %w", err)
		}
		s.dev = dev
	}
	return s.dev, nil
}

// broken drops dev after a failure of the connection (not a SCSI status:
// a refused command leaves the session up), for the next write to log in
// again.
func (s *session) broken(dev iscsi.Device) {
	s.mu.Lock()
	if s.dev == dev {
		s.dev = nil
	}
	s.mu.Unlock()
	closeDevice(dev)
}

// close logs out for good.
func (s *session) close() {
	s.mu.Lock()
	dev := s.dev
	s.dev, s.closed = nil, true
	s.mu.Unlock()
	if dev != nil {
		closeDevice(dev)
	}
}

// stageISCSI is the node's half of staging a volume the tgt backend serves:
// log in to its target as this node's initiator (registering the node's
// reservation key when the volume is fenced by reservations), as a node's
// iscsid does before the driver mounts the device. A publish context
// without the backend's keys is a volume of the memory backend: nil, nil.
func (k *Kubelet) stageISCSI(ctx context.Context, publishContext map[string]string) (*session, error) {
	if publishContext[tgt.PublishContextPortal] == "" {
		return nil, nil
	}
	opts, err := iscsi.FromPublishContext(publishContext)
	if err != nil {
		return nil, err
	}
	dev, err := iscsi.LoginGo(ctx, opts, "")
	if err != nil {
		return nil, fmt.Errorf("iSCSI login at staging: %w", err)
	}
	return &session{opts: opts, blocks: dev.Blocks(), dev: dev}, nil
}

// blockWrite returns the write of a volume staged through iSCSI: stamped
// blocks through the node's own session, each recorded in the volume's
// ledger, cycling through the first blocks of the LUN that every node's
// writer shares (so that a fenced node that wrote on would overwrite its
// successor, where the byte checker sees it).
func (k *Kubelet) blockWrite(v *volume, sess *session) func(context.Context, int) error {
	k.generation++
	bw := &iscsi.Writer{
		Ledger: k.cfg.Ledgers.For(LedgerKey(v.driver.name, v.handle)),
		Stamp:  iscsi.Stamp{Node: k.cfg.NodeName, Boot: fmt.Sprint(k.boot), Generation: k.generation},
		Span:   uint32(max(min(sess.blocks, BlockSpan), 1)),
	}
	return func(ctx context.Context, _ int) error {
		dev, err := sess.device(ctx)
		if err != nil {
			return err
		}
		bw.Session = dev
		err = bw.WriteNext()
		var se *iscsi.SCSIError
		if err != nil && !errors.As(err, &se) {
			sess.broken(dev)
		}
		return err
	}
}

// BlockSpan is how many blocks a volume's writers cycle through.
const BlockSpan = 64

// closeDevice ends a volume's session without waiting on a target that
// may be gone.
func closeDevice(d iscsi.Device) {
	done := make(chan struct{})
	go func() { _ = d.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

package kubelet

import (
	"context"
	"fmt"
	"time"

	"fenceline.io/fenceline/mock-driver/tgt"
	"fenceline.io/fenceline/test/iscsi"
)

// ledgerKey names a volume's ledger in Config.Ledgers: handles are a
// driver's own.
func ledgerKey(driver, handle string) string { return driver + "/" + handle }

// LedgerKey is the key of a volume's ledger in Config.Ledgers.
func LedgerKey(driver, handle string) string { return ledgerKey(driver, handle) }

// stageISCSI is the node's half of staging a volume the tgt backend serves:
// log in to its target as this node's initiator (registering the node's
// reservation key when the volume is fenced by reservations), as a node's
// iscsid does before the driver mounts the device. A publish context
// without the backend's keys is a volume of the memory backend: nil, nil.
func (k *Kubelet) stageISCSI(ctx context.Context, publishContext map[string]string) (iscsi.Device, error) {
	if publishContext[tgt.PublishContextPortal] == "" {
		return nil, nil
	}
	opts, err := iscsi.FromPublishContext(publishContext)
	if err != nil {
		return nil, err
	}
	s, err := iscsi.LoginGo(ctx, opts, "")
	if err != nil {
		return nil, fmt.Errorf("iSCSI login at staging: %w", err)
	}
	return s, nil
}

// blockWriter is the writer of a volume staged through iSCSI: stamped
// blocks through the node's own session, each recorded in the volume's
// ledger, cycling through the first blocks of the LUN that every node's
// writer shares (so that a fenced node that wrote on would overwrite its
// successor, where the byte checker sees it).
func (k *Kubelet) blockWriter(v *volume, boot int) *iscsi.Writer {
	k.generation++
	span := uint32(BlockSpan)
	if s, ok := v.dev.(interface{ Blocks() uint64 }); ok && s.Blocks() < uint64(span) {
		span = uint32(s.Blocks())
	}
	return &iscsi.Writer{
		Session: v.dev,
		Ledger:  k.cfg.Ledgers.For(ledgerKey(v.driver.name, v.handle)),
		Stamp:   iscsi.Stamp{Node: k.cfg.NodeName, Boot: fmt.Sprint(boot), Generation: k.generation},
		Span:    max(span, 1),
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

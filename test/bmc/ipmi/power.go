package ipmi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
)

// Power is the power rail of the simulated node behind the BMC. The
// simulator calls it while it handles a Chassis Control command, before it
// answers and before Get Chassis Status can read the new state: once the BMC
// reports Off, PowerOff has returned, so a harness that stops the node's
// heartbeats and writes there never lets a fencer see Off while the node
// still writes. PowerOn should start the boot and return; a hook that blocks
// delays the BMC's answer as a slow BMC would.
type Power interface {
	// PowerOff cuts the node's power: its kubelet stops heartbeating and
	// writing.
	PowerOff(ctx context.Context) error
	// PowerOn boots the node, with a new boot ID.
	PowerOn(ctx context.Context) error
}

// PowerFuncs adapts two functions to Power, for a harness that already has
// them (a cluster's PowerOff and PowerOn of one node). A nil function is a
// no-op.
type PowerFuncs struct {
	Off func(ctx context.Context) error
	On  func(ctx context.Context) error
}

// PowerOff calls Off.
func (p PowerFuncs) PowerOff(ctx context.Context) error {
	if p.Off == nil {
		return nil
	}
	return p.Off(ctx)
}

// PowerOn calls On.
func (p PowerFuncs) PowerOn(ctx context.Context) error {
	if p.On == nil {
		return nil
	}
	return p.On(ctx)
}

// Node is an in-memory simulated node: it is powered or not, and every boot
// gives it a new boot ID, as a real reboot does.
type Node struct {
	mu     sync.Mutex
	on     bool
	bootID string
	boots  int
	offs   int
}

// NewNode returns a node, booted once when on.
func NewNode(on bool) *Node {
	n := &Node{}
	if on {
		n.boot()
	}
	return n
}

// PowerOff cuts the node's power.
func (n *Node) PowerOff(context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.on {
		n.on = false
		n.offs++
	}
	return nil
}

// PowerOn boots the node with a new boot ID; a powered node is left alone.
func (n *Node) PowerOn(context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.on {
		n.boot()
	}
	return nil
}

func (n *Node) boot() {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	n.on, n.bootID = true, hex.EncodeToString(b)
	n.boots++
}

// On reports whether the node has power.
func (n *Node) On() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.on
}

// BootID is the ID of the node's current (or last) boot.
func (n *Node) BootID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.bootID
}

// Boots counts the node's boots.
func (n *Node) Boots() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.boots
}

// PowerOffs counts the node's power cuts.
func (n *Node) PowerOffs() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.offs
}

// String describes the node for test failures.
func (n *Node) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return fmt.Sprintf("node{on: %v, boots: %d, offs: %d}", n.on, n.boots, n.offs)
}

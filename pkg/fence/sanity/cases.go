package sanity

import (
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The names of the cases, as subtests and in the command's output.
const (
	caseDiscovery       = "discovery"
	caseFenceCutsIO     = "fence-cuts-io"
	caseNoRepublish     = "no-republish-before-cleanup"
	caseCleanupLifts    = "cleanup-lifts-fence"
	caseFenceAfterClean = "fence-after-cleanup"
	caseVolumeMoves     = "volume-moves"
	caseNoNodeID        = "fence-without-node-id"
	caseIdempotency     = "idempotency"
	caseErrorCodes      = "error-codes"
	caseForceUnpublish  = "force-unpublish"
	caseListFences      = "list-fences"
	caseListPaging      = "list-fences-pagination"
	caseLiftFence       = "lift-fence"
)

// testCase is one named check.
type testCase struct {
	name string
	run  func(*env) error
}

var cases = []testCase{
	{name: caseDiscovery, run: discovery},
	{name: caseFenceCutsIO, run: fenceCutsIO},
	{name: caseNoRepublish, run: noRepublishBeforeCleanup},
	{name: caseCleanupLifts, run: cleanupLiftsFence},
	{name: caseFenceAfterClean, run: fenceAfterCleanup},
	{name: caseVolumeMoves, run: volumeMoves},
	{name: caseNoNodeID, run: fenceWithoutNodeID},
	{name: caseIdempotency, run: idempotency},
	{name: caseErrorCodes, run: errorCodes},
	{name: caseForceUnpublish, run: forceUnpublish},
	{name: caseListFences, run: listFences},
	{name: caseListPaging, run: listFencesPagination},
	{name: caseLiftFence, run: liftFence},
}

// discovery reads the capabilities of every endpoint and checks them
// against the contract. The other cases use what it learnt.
func discovery(e *env) error {
	cfg := e.s.cfg
	name, ctrlCaps, err := e.discoverEndpoint(cfg.ControllerEndpoint)
	if err != nil {
		return err
	}
	caps := driverCaps{unpublishFence: ctrlCaps.UnpublishFence, listFences: ctrlCaps.ListFences, liftFence: ctrlCaps.LiftFence}
	if caps.liftFence && !caps.listFences {
		return fmt.Errorf("the controller advertises LIFT_FENCE without LIST_FENCES: a CO lifts what ListFences showed it, and reads back that it is gone")
	}
	ctrl, err := e.controller()
	if err != nil {
		return err
	}
	cc, err := ctrl.ControllerGetCapabilities(e.ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		return fmt.Errorf("ControllerGetCapabilities: %w", err)
	}
	for _, c := range cc.GetCapabilities() {
		switch c.GetRpc().GetType() {
		case csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME:
			caps.publishUnpublish = true
		case csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME:
			caps.createDelete = true
		case csi.ControllerServiceCapability_RPC_LIST_VOLUMES:
			caps.listVolumes = true
		case csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES:
			caps.listPublished = true
		}
	}
	if caps.unpublishFence && !caps.publishUnpublish {
		return fmt.Errorf("the controller advertises UNPUBLISH_FENCE without PUBLISH_UNPUBLISH_VOLUME: a fence is a ControllerUnpublishVolume, which such a driver never receives")
	}
	e.logf("controller %s: driver %s, UNPUBLISH_FENCE=%v FORCE_UNPUBLISH=%v LIST_FENCES=%v LIFT_FENCE=%v",
		cfg.ControllerEndpoint, name, ctrlCaps.UnpublishFence, ctrlCaps.ForceUnpublish, ctrlCaps.ListFences, ctrlCaps.LiftFence)
	for i, n := range cfg.Nodes {
		nc, err := e.discoverNode(i, n, name)
		if err != nil {
			return err
		}
		caps.nodes = append(caps.nodes, nc)
	}
	e.s.caps = caps
	return nil
}

// discoverNode checks node plugin i: same driver name, a stable capability
// answer on the same socket as its Identity service, and the node ID.
func (e *env) discoverNode(i int, n Node, driverName string) (nodeCaps, error) {
	name, caps, err := e.discoverEndpoint(n.Endpoint)
	if err != nil {
		return nodeCaps{}, err
	}
	if name != driverName {
		return nodeCaps{}, fmt.Errorf("node endpoint %s serves driver %q, the controller endpoint %q", n.Endpoint, name, driverName)
	}
	node, err := e.node(i)
	if err != nil {
		return nodeCaps{}, err
	}
	info, err := node.NodeGetInfo(e.ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return nodeCaps{}, fmt.Errorf("NodeGetInfo on %s: %w", n.Endpoint, err)
	}
	if n.ID != "" && info.GetNodeId() != n.ID {
		return nodeCaps{}, fmt.Errorf("NodeGetInfo on %s answers node %q, configured as %q", n.Endpoint, info.GetNodeId(), n.ID)
	}
	nc := nodeCaps{id: info.GetNodeId(), forceUnpublish: caps.ForceUnpublish}
	ncaps, err := node.NodeGetCapabilities(e.ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		return nodeCaps{}, fmt.Errorf("NodeGetCapabilities on %s: %w", n.Endpoint, err)
	}
	for _, c := range ncaps.GetCapabilities() {
		if c.GetRpc().GetType() == csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME {
			nc.stageUnstage = true
		}
	}
	e.logf("node %s at %s: FORCE_UNPUBLISH=%v STAGE_UNSTAGE_VOLUME=%v", nc.id, n.Endpoint, nc.forceUnpublish, nc.stageUnstage)
	return nc, nil
}

// requireFence skips a case for a driver without UNPUBLISH_FENCE.
func (e *env) requireFence() error {
	if !e.s.caps.unpublishFence {
		return skipf("the controller does not advertise UNPUBLISH_FENCE")
	}
	return nil
}

// fencedAttachment attaches a fresh volume to the first node, checks that
// the node can write, and fences it.
func (e *env) fencedAttachment() (*attachment, error) {
	v, err := e.volume()
	if err != nil {
		return nil, err
	}
	return e.fenceOff(v)
}

// fenceOff attaches v to the first node, checks that the node can write,
// and fences it.
func (e *env) fenceOff(v volume) (*attachment, error) {
	a, err := e.attach(v, 0)
	if err != nil {
		return nil, err
	}
	if err := e.mustWrite(a, "before the fence"); err != nil {
		return nil, err
	}
	if err := e.unpublish(a, true); err != nil {
		return nil, fmt.Errorf("ControllerUnpublishVolume %s from node %s with fence=true: %w", v.id, a.nodeID, err)
	}
	e.logf("ControllerUnpublishVolume fence=true returned OK")
	return a, nil
}

// fenceCutsIO: once a fence returned OK, I/O from the node fails at once,
// although the volume is still staged and published there.
func fenceCutsIO(e *env) error {
	if err := e.requireFence(); err != nil {
		return err
	}
	if e.s.cfg.IO == nil {
		return skipf("no I/O hook configured: cannot tell whether the fence cuts the node's I/O")
	}
	a, err := e.fencedAttachment()
	if err != nil {
		return err
	}
	err = e.write(a)
	if err == nil {
		return fmt.Errorf("I/O from node %s to %s still succeeds after ControllerUnpublishVolume with fence=true returned OK: the revocation must be in effect before the call returns", a.nodeID, a.vol.id)
	}
	e.logf("I/O after the fence fails as it must: %v", err)
	return nil
}

// noRepublishBeforeCleanup: the fenced node cannot get the volume back
// before its node-side clean-up ran, not even half of it.
func noRepublishBeforeCleanup(e *env) error {
	if err := e.requireFence(); err != nil {
		return err
	}
	a, err := e.fencedAttachment()
	if err != nil {
		return err
	}
	if err := e.mustRefusePublish(a, "before any node-side clean-up"); err != nil {
		return err
	}
	if !e.s.caps.nodes[a.node].stageUnstage {
		return nil
	}
	ctx, cancel := e.rpcContext()
	defer cancel()
	if err := e.nodeUnpublish(ctx, a, false); err != nil {
		return err
	}
	return e.mustRefusePublish(a, "after NodeUnpublishVolume but before NodeUnstageVolume")
}

// mustRefusePublish checks that ControllerPublishVolume of a fails with
// FAILED_PRECONDITION, the code the contract gives for a publish to a node
// fenced off the volume.
func (e *env) mustRefusePublish(a *attachment, when string) error {
	_, err := e.controllerPublish(a)
	switch status.Code(err) {
	case codes.OK:
		return fmt.Errorf("ControllerPublishVolume %s to fenced node %s succeeded %s: the driver must refuse it until the node-side clean-up ran", a.vol.id, a.nodeID, when)
	case codes.FailedPrecondition:
		e.logf("ControllerPublishVolume to the fenced node %s is refused: %v", when, err)
		return nil
	default:
		return fmt.Errorf("ControllerPublishVolume %s to fenced node %s %s: %w; want FAILED_PRECONDITION, the code for a node fenced off the volume", a.vol.id, a.nodeID, when, err)
	}
}

// cleanupLiftsFence: an unforced NodeUnpublishVolume / NodeUnstageVolume, as
// the upstream kubelet sends them, succeed on a fenced volume and lift the
// fence.
func cleanupLiftsFence(e *env) error {
	if err := e.requireFence(); err != nil {
		return err
	}
	a, err := e.fencedAttachment()
	if err != nil {
		return err
	}
	if err := e.nodeCleanup(a, false); err != nil {
		return fmt.Errorf("unforced node-side clean-up of a fenced volume (what a kubelet sends): %w", err)
	}
	return e.reattach(a, "after the unforced node-side clean-up")
}

// reattach publishes a again to its node and checks that it can write.
func (e *env) reattach(a *attachment, when string) error {
	pc, err := e.controllerPublish(a)
	if err != nil {
		return fmt.Errorf("ControllerPublishVolume %s to node %s %s: %w (the clean-up must lift the fence)", a.vol.id, a.nodeID, when, err)
	}
	a.publishContext = pc
	if err := e.stageAndPublish(a); err != nil {
		return fmt.Errorf("%s: %w", when, err)
	}
	return e.mustWrite(a, when)
}

// fenceAfterCleanup: a node that had already run its node-side clean-up
// when the fence arrived (a partition that healed before the detach) is
// detached without a lasting fence.
func fenceAfterCleanup(e *env) error {
	if err := e.requireFence(); err != nil {
		return err
	}
	v, err := e.volume()
	if err != nil {
		return err
	}
	a, err := e.attach(v, 0)
	if err != nil {
		return err
	}
	if err := e.nodeCleanup(a, false); err != nil {
		return err
	}
	if err := e.unpublish(a, true); err != nil {
		return fmt.Errorf("ControllerUnpublishVolume fence=true of a volume the node already cleaned up: %w", err)
	}
	return e.reattach(a, "after a fence of a node that held nothing of the volume")
}

// volumeMoves: what the CO fences for. After the fence of the first node,
// the volume is published to the second one, which can write, while the
// fenced node still cannot.
func volumeMoves(e *env) error {
	if err := e.requireFence(); err != nil {
		return err
	}
	if len(e.s.caps.nodes) < 2 {
		return skipf("needs a second node plugin to move the volume to")
	}
	a, err := e.fencedAttachment()
	if err != nil {
		return err
	}
	b, err := e.attach(a.vol, 1)
	if err != nil {
		return fmt.Errorf("moving the volume to node %s after the fence of node %s: %w", e.s.caps.nodes[1].id, a.nodeID, err)
	}
	if err := e.mustWrite(b, "on the node the volume moved to"); err != nil {
		return err
	}
	if e.s.cfg.IO != nil {
		if err := e.write(a); err == nil {
			return fmt.Errorf("fenced node %s can still write to %s after it moved to node %s: two nodes write to one volume", a.nodeID, a.vol.id, b.nodeID)
		}
		e.logf("the fenced node still cannot write after the move")
	}
	return nil
}

// fenceWithoutNodeID: node_id is optional in ControllerUnpublishVolume;
// without it the volume is unpublished from every node, so fence=true
// fences every node that holds it, and answers OK only once all are cut off.
func fenceWithoutNodeID(e *env) error {
	if err := e.requireFence(); err != nil {
		return err
	}
	v, err := e.volume()
	if err != nil {
		return err
	}
	a, err := e.attach(v, 0)
	if err != nil {
		return err
	}
	if err := e.mustWrite(a, "before the fence"); err != nil {
		return err
	}
	ctx, cancel := e.rpcContext()
	defer cancel()
	if err := e.unpublishCtx(ctx, v.id, "", true); err != nil {
		return fmt.Errorf("ControllerUnpublishVolume %s with fence=true and no node_id: %w (an empty node_id means every node)", v.id, err)
	}
	e.logf("ControllerUnpublishVolume fence=true without node_id returned OK")
	if e.s.cfg.IO != nil {
		if err := e.write(a); err == nil {
			return fmt.Errorf("node %s can still write to %s after a fence without node_id returned OK", a.nodeID, v.id)
		}
		e.logf("I/O from node %s fails after the fence without node_id", a.nodeID)
	}
	return e.mustRefusePublish(a, "after a fence without node_id")
}

// idempotency: fencing twice, and any unpublish of a fenced or detached
// volume, return OK.
func idempotency(e *env) error {
	if err := e.requireFence(); err != nil {
		return err
	}
	a, err := e.fencedAttachment()
	if err != nil {
		return err
	}
	steps := []struct {
		what  string
		fence bool
	}{
		{"a second fence of the fenced volume", true},
		{"a plain unpublish of the fenced volume", false},
	}
	for _, s := range steps {
		if err := e.unpublish(a, s.fence); err != nil {
			return fmt.Errorf("%s: ControllerUnpublishVolume: %w", s.what, err)
		}
		e.logf("%s returned OK", s.what)
	}
	if err := e.nodeCleanup(a, false); err != nil {
		return err
	}
	if err := e.nodeCleanup(a, false); err != nil {
		return fmt.Errorf("node-side clean-up repeated: %w", err)
	}
	for _, s := range []string{"a fence of the detached volume", "a fence of the detached volume, repeated"} {
		if err := e.unpublish(a, true); err != nil {
			return fmt.Errorf("%s: ControllerUnpublishVolume: %w", s, err)
		}
		e.logf("%s returned OK", s)
	}
	return nil
}

// forceUnpublish: with FORCE_UNPUBLISH, forced node-side clean-up of a
// fenced volume (or of a healthy one, for a driver without
// UNPUBLISH_FENCE) succeeds, is idempotent and leaves the volume usable on
// the node again.
func forceUnpublish(e *env) error {
	if !e.s.caps.nodes[0].forceUnpublish {
		return skipf("node %s does not advertise FORCE_UNPUBLISH", e.s.caps.nodes[0].id)
	}
	var a *attachment
	if e.s.caps.unpublishFence {
		var err error
		if a, err = e.fencedAttachment(); err != nil {
			return err
		}
	} else {
		v, err := e.volume()
		if err != nil {
			return err
		}
		if a, err = e.attach(v, 0); err != nil {
			return err
		}
	}
	for _, round := range []string{"forced node-side clean-up", "forced node-side clean-up, repeated"} {
		if err := e.nodeCleanup(a, true); err != nil {
			return fmt.Errorf("%s: %w", round, err)
		}
		e.logf("%s returned OK", round)
	}
	if !e.s.caps.unpublishFence {
		if err := e.unpublish(a, false); err != nil {
			return fmt.Errorf("ControllerUnpublishVolume after the forced clean-up: %w", err)
		}
	}
	return e.reattach(a, "after the forced node-side clean-up")
}

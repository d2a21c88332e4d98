package sanity

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// liftFence: LiftFence refuses an empty node_id, lifts the fence of the
// node so that ListFences stops showing it, is idempotent, gives the node
// nothing back (the volume is not published to it and its I/O still
// fails), and lets a later ControllerPublishVolume to the node succeed.
func liftFence(e *env) error {
	if !e.s.caps.liftFence {
		return skipf("the controller does not advertise LIFT_FENCE")
	}
	if err := e.liftCodes(); err != nil {
		return err
	}
	if err := e.requireFenceToList("lifting a fence"); err != nil {
		return err
	}
	a, err := e.fencedAttachment()
	if err != nil {
		return err
	}
	if e.s.cfg.IO != nil && e.write(a) == nil {
		// The I/O check after the lift would blame the lift for what the
		// fence left open.
		return fmt.Errorf("node %s can still write to %s after the fence, before any lift: the fence does not cut I/O (see %s), so the lift cannot be judged", a.nodeID, a.vol.id, caseFenceCutsIO)
	}
	req, err := e.liftRequest(a)
	if err != nil {
		return err
	}
	if err := e.liftOnce(a, req); err != nil {
		return err
	}
	again, err := e.lift(req)
	if err != nil {
		return fmt.Errorf("LiftFence repeated: %w (lifting is idempotent)", err)
	}
	if len(again) != 0 {
		return fmt.Errorf("LiftFence repeated reports %d fences lifted, want none: they were lifted already", len(again))
	}
	e.logf("LiftFence repeated returned OK and lifted nothing")
	if err := e.liftPublishedNothing(a); err != nil {
		return err
	}
	if _, err := e.controllerPublish(a); err != nil {
		return fmt.Errorf("ControllerPublishVolume %s to node %s after LiftFence: %w; once the fence is lifted it must not refuse the node", a.vol.id, a.nodeID, err)
	}
	e.logf("ControllerPublishVolume to node %s succeeds after the lift", a.nodeID)
	return nil
}

// liftCodes checks LiftFence requests that need no fence: no node_id is
// INVALID_ARGUMENT, a node without fences is OK with nothing lifted.
func (e *env) liftCodes() error {
	if _, err := e.lift(&fencev1.LiftFenceRequest{Reason: "fence-sanity: no node_id"}); status.Code(err) != codes.InvalidArgument {
		return fmt.Errorf("LiftFence without node_id: got %s (%v), want %s", status.Code(err), err, codes.InvalidArgument)
	}
	e.logf("LiftFence without node_id: %s", codes.InvalidArgument)
	unknown := fmt.Sprintf("%s-no-such-node-%d", e.s.cfg.VolumeNamePrefix, time.Now().UnixNano())
	lifted, err := e.lift(&fencev1.LiftFenceRequest{NodeId: unknown, Reason: "fence-sanity: a node without fences"})
	if err != nil {
		return fmt.Errorf("LiftFence of node %q, which has no fence: %w (lifting nothing is OK)", unknown, err)
	}
	if len(lifted) != 0 {
		return fmt.Errorf("LiftFence of node %q, which has no fence, reports %d fences lifted", unknown, len(lifted))
	}
	e.logf("LiftFence of a node without fences: OK, nothing lifted")
	return nil
}

// liftRequest finds the fence of a in ListFences and asks to lift only
// that volume's, unless the fence is node-wide, which is lifted whole.
func (e *env) liftRequest(a *attachment) (*fencev1.LiftFenceRequest, error) {
	fs, _, err := e.walkFences(a.nodeID, 0)
	if err != nil {
		return nil, err
	}
	f := covering(fs, a.nodeID, a.vol.id)
	if f == nil {
		return nil, fmt.Errorf("ListFences shows no fence of node %s covering volume %s after ControllerUnpublishVolume with fence=true returned OK", a.nodeID, a.vol.id)
	}
	req := &fencev1.LiftFenceRequest{NodeId: a.nodeID, Reason: "fence-sanity: the " + caseLiftFence + " case"}
	if !f.GetAllVolumes() {
		req.VolumeIds = []string{a.vol.id}
	}
	e.logf("lifting %s", describe(f))
	return req, nil
}

// liftOnce lifts a's fence and checks that the answer names it and that
// ListFences no longer shows it.
func (e *env) liftOnce(a *attachment, req *fencev1.LiftFenceRequest) error {
	lifted, err := e.lift(req)
	if err != nil {
		return fmt.Errorf("LiftFence of node %s (volume_ids %q): %w", a.nodeID, req.GetVolumeIds(), err)
	}
	if covering(lifted, a.nodeID, a.vol.id) == nil {
		return fmt.Errorf("LiftFence returned OK but its answer lists no fence of node %s covering volume %s (it lists %d)", a.nodeID, a.vol.id, len(lifted))
	}
	fs, _, err := e.walkFences(a.nodeID, 0)
	if err != nil {
		return err
	}
	if f := covering(fs, a.nodeID, a.vol.id); f != nil {
		return fmt.Errorf("ListFences still shows %s after LiftFence returned OK: the lift must be in effect when the call returns", describe(f))
	}
	e.logf("LiftFence returned OK; ListFences no longer shows the fence")
	return nil
}

// liftPublishedNothing checks that the lift gave the node nothing back: the
// volume is not published to it (when ListVolumes can tell), and its I/O
// still fails (when there is an I/O hook).
func (e *env) liftPublishedNothing(a *attachment) error {
	if e.s.caps.listVolumes && e.s.caps.listPublished {
		published, err := e.publishedTo(a.vol.id, a.nodeID)
		if err != nil {
			return err
		}
		if published {
			return fmt.Errorf("after LiftFence, ListVolumes shows volume %s published to node %s: lifting a fence must never publish", a.vol.id, a.nodeID)
		}
		e.logf("ListVolumes: volume %s is not published to node %s after the lift", a.vol.id, a.nodeID)
	} else {
		e.logf("not checking with ListVolumes that the lift published nothing: the controller does not advertise LIST_VOLUMES and LIST_VOLUMES_PUBLISHED_NODES")
	}
	if e.s.cfg.IO == nil {
		e.logf("no I/O hook: not checking that node %s still cannot write after the lift", a.nodeID)
		return nil
	}
	if err := e.write(a); err == nil {
		return fmt.Errorf("node %s can write to %s after LiftFence, before any ControllerPublishVolume: lifting a fence must not give the node its access back", a.nodeID, a.vol.id)
	}
	e.logf("I/O from node %s still fails after the lift, as it must", a.nodeID)
	return nil
}

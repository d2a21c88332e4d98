package sanity

import (
	"context"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/pkg/fence"
	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// rawCapabilities calls GetFenceCapabilities and checks the answer against
// the contract: UNIMPLEMENTED is "no support", any other error is an error,
// FENCE_CAPABILITY_UNKNOWN is never sent.
func rawCapabilities(ctx context.Context, conn grpc.ClientConnInterface) (fence.Capabilities, error) {
	resp, err := fencev1.NewFenceCapabilitiesClient(conn).GetFenceCapabilities(ctx, &fencev1.GetFenceCapabilitiesRequest{})
	if status.Code(err) == codes.Unimplemented {
		return fence.Capabilities{}, nil
	}
	if err != nil {
		return fence.Capabilities{}, fmt.Errorf("GetFenceCapabilities: %w (only UNIMPLEMENTED means no support)", err)
	}
	for _, c := range resp.GetCapabilities() {
		if c == fencev1.FenceCapability_FENCE_CAPABILITY_UNKNOWN {
			return fence.Capabilities{}, fmt.Errorf("GetFenceCapabilities lists FENCE_CAPABILITY_UNKNOWN, which is never sent")
		}
	}
	return fence.CapabilitiesFromList(resp.GetCapabilities()), nil
}

// volume is the volume a case works on.
type volume struct {
	id      string
	context map[string]string
}

// attachment is a volume published to, staged and published on one node.
type attachment struct {
	vol             volume
	node            int
	nodeID          string
	publishContext  map[string]string
	staging, target string
	attempt         int
}

// volume returns the configured volume, or creates one that is deleted at
// the end of the case.
func (e *env) volume() (volume, error) {
	cfg := e.s.cfg
	if cfg.VolumeID != "" {
		return volume{id: cfg.VolumeID, context: cfg.VolumeContext}, nil
	}
	if !e.s.caps.createDelete {
		return volume{}, skipf("no volume configured and the controller does not advertise CREATE_DELETE_VOLUME")
	}
	ctrl, err := e.controller()
	if err != nil {
		return volume{}, err
	}
	name := fmt.Sprintf("%s-%s-%d", cfg.VolumeNamePrefix, e.name, time.Now().UnixNano())
	ctx, cancel := e.rpcContext()
	defer cancel()
	resp, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csi.CapacityRange{RequiredBytes: cfg.CapacityBytes},
		VolumeCapabilities: []*csi.VolumeCapability{cfg.VolumeCapability},
		Parameters:         cfg.Parameters,
		Secrets:            cfg.Secrets.CreateVolume,
	})
	if err != nil {
		return volume{}, fmt.Errorf("CreateVolume %s: %w", name, err)
	}
	v := volume{id: resp.GetVolume().GetVolumeId(), context: resp.GetVolume().GetVolumeContext()}
	e.deferCleanup(func(ctx context.Context) error {
		if _, err := ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.id, Secrets: cfg.Secrets.DeleteVolume}); err != nil {
			return fmt.Errorf("DeleteVolume %s: %w", v.id, err)
		}
		return nil
	})
	return v, nil
}

// attach publishes v to node i, then stages and publishes it there, as a CO
// does before a pod starts. The end of the case cleans up, as a kubelet and
// attacher would: node-side clean-up, then a plain unpublish.
func (e *env) attach(v volume, i int) (*attachment, error) {
	a := &attachment{vol: v, node: i, nodeID: e.s.caps.nodes[i].id}
	e.deferCleanup(func(ctx context.Context) error { return e.detach(ctx, a) })
	pc, err := e.controllerPublish(a)
	if err != nil {
		return nil, fmt.Errorf("ControllerPublishVolume %s to node %s: %w", v.id, a.nodeID, err)
	}
	a.publishContext = pc
	if err := e.stageAndPublish(a); err != nil {
		return nil, err
	}
	return a, nil
}

// controllerPublish sends ControllerPublishVolume for a.
func (e *env) controllerPublish(a *attachment) (map[string]string, error) {
	ctrl, err := e.controller()
	if err != nil {
		return nil, err
	}
	ctx, cancel := e.rpcContext()
	defer cancel()
	resp, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
		VolumeId:         a.vol.id,
		NodeId:           a.nodeID,
		VolumeCapability: e.s.cfg.VolumeCapability,
		VolumeContext:    a.vol.context,
		Secrets:          e.s.cfg.Secrets.ControllerPublishVolume,
	})
	if err != nil {
		return nil, err
	}
	return resp.GetPublishContext(), nil
}

// stageAndPublish stages (when the node plugin has STAGE_UNSTAGE_VOLUME) and
// publishes a on its node, at fresh paths.
func (e *env) stageAndPublish(a *attachment) error {
	a.attempt++
	staging, target, err := e.paths(a.vol.id, a.attempt)
	if err != nil {
		return err
	}
	node, err := e.node(a.node)
	if err != nil {
		return err
	}
	ctx, cancel := e.rpcContext()
	defer cancel()
	if e.s.caps.nodes[a.node].stageUnstage {
		a.staging = staging
		if _, err := node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
			VolumeId:          a.vol.id,
			PublishContext:    a.publishContext,
			StagingTargetPath: staging,
			VolumeCapability:  e.s.cfg.VolumeCapability,
			VolumeContext:     a.vol.context,
			Secrets:           e.s.cfg.Secrets.NodeStageVolume,
		}); err != nil {
			return fmt.Errorf("NodeStageVolume %s on node %s: %w", a.vol.id, a.nodeID, err)
		}
	}
	a.target = target
	if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId:          a.vol.id,
		PublishContext:    a.publishContext,
		StagingTargetPath: a.staging,
		TargetPath:        target,
		VolumeCapability:  e.s.cfg.VolumeCapability,
		VolumeContext:     a.vol.context,
		Secrets:           e.s.cfg.Secrets.NodePublishVolume,
	}); err != nil {
		return fmt.Errorf("NodePublishVolume %s on node %s: %w", a.vol.id, a.nodeID, err)
	}
	return nil
}

// nodeUnpublish sends NodeUnpublishVolume for a's target, forced or not.
func (e *env) nodeUnpublish(ctx context.Context, a *attachment, force bool) error {
	node, err := e.node(a.node)
	if err != nil {
		return err
	}
	req := &csi.NodeUnpublishVolumeRequest{VolumeId: a.vol.id, TargetPath: a.target}
	fence.SetForceUnpublish(req, force)
	if _, err := node.NodeUnpublishVolume(ctx, req); err != nil {
		return fmt.Errorf("NodeUnpublishVolume %s on node %s (force=%v): %w", a.vol.id, a.nodeID, force, err)
	}
	return nil
}

// nodeUnstage sends NodeUnstageVolume for a's staging path, forced or not;
// nothing when the node plugin has no STAGE_UNSTAGE_VOLUME.
func (e *env) nodeUnstage(ctx context.Context, a *attachment, force bool) error {
	if !e.s.caps.nodes[a.node].stageUnstage {
		return nil
	}
	node, err := e.node(a.node)
	if err != nil {
		return err
	}
	req := &csi.NodeUnstageVolumeRequest{VolumeId: a.vol.id, StagingTargetPath: a.staging}
	fence.SetForceUnstage(req, force)
	if _, err := node.NodeUnstageVolume(ctx, req); err != nil {
		return fmt.Errorf("NodeUnstageVolume %s on node %s (force=%v): %w", a.vol.id, a.nodeID, force, err)
	}
	return nil
}

// nodeCleanup runs the node-side clean-up of a, as a kubelet sends it.
func (e *env) nodeCleanup(a *attachment, force bool) error {
	ctx, cancel := e.rpcContext()
	defer cancel()
	if err := e.nodeUnpublish(ctx, a, force); err != nil {
		return err
	}
	return e.nodeUnstage(ctx, a, force)
}

// unpublish sends ControllerUnpublishVolume of a's volume from a's node,
// with fence = true or without the field.
func (e *env) unpublish(a *attachment, fenced bool) error {
	ctx, cancel := e.rpcContext()
	defer cancel()
	return e.unpublishCtx(ctx, a.vol.id, a.nodeID, fenced)
}

func (e *env) unpublishCtx(ctx context.Context, volumeID, nodeID string, fenced bool) error {
	ctrl, err := e.controller()
	if err != nil {
		return err
	}
	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID, NodeId: nodeID, Secrets: e.s.cfg.Secrets.ControllerUnpublishVolume}
	fence.SetFence(req, fenced)
	_, err = ctrl.ControllerUnpublishVolume(ctx, req)
	return err
}

// detach is the end-of-case clean-up of a: every call is idempotent, so it
// is harmless where the case already did part of it.
func (e *env) detach(ctx context.Context, a *attachment) error {
	if a.target != "" {
		if err := e.nodeUnpublish(ctx, a, false); err != nil {
			return err
		}
	}
	if a.staging != "" {
		if err := e.nodeUnstage(ctx, a, false); err != nil {
			return err
		}
	}
	if err := e.unpublishCtx(ctx, a.vol.id, a.nodeID, false); err != nil {
		return fmt.Errorf("ControllerUnpublishVolume %s from node %s: %w", a.vol.id, a.nodeID, err)
	}
	return nil
}

// write runs the driver author's I/O hook as a's node.
func (e *env) write(a *attachment) error {
	ctx, cancel := e.rpcContext()
	defer cancel()
	return e.s.cfg.IO.Write(ctx, a.vol.id, a.nodeID)
}

// mustWrite checks that a's node can write to the volume.
func (e *env) mustWrite(a *attachment, when string) error {
	if e.s.cfg.IO == nil {
		e.logf("no I/O hook: not checking that node %s can write %s", a.nodeID, when)
		return nil
	}
	if err := e.write(a); err != nil {
		return fmt.Errorf("I/O from node %s to %s failed %s: %w", a.nodeID, a.vol.id, when, err)
	}
	e.logf("I/O from node %s works %s", a.nodeID, when)
	return nil
}

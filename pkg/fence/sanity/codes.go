package sanity

import (
	"context"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/pkg/fence"
)

// errorCodes checks the codes of invalid fenced and forced requests.
func errorCodes(e *env) error {
	if !e.s.caps.unpublishFence && !e.s.caps.nodes[0].forceUnpublish {
		return skipf("the driver advertises neither UNPUBLISH_FENCE nor FORCE_UNPUBLISH")
	}
	checks := e.codeChecks()
	for _, c := range checks {
		err := c.call()
		got := status.Code(err)
		ok := false
		for _, w := range c.want {
			ok = ok || got == w
		}
		if !ok {
			return fmt.Errorf("%s: got %s (%v), want one of %v", c.what, got, err, c.want)
		}
		e.logf("%s: %s", c.what, got)
	}
	return nil
}

// codeCheck is one request of errorCodes and the codes it may answer.
type codeCheck struct {
	what string
	call func() error
	want []codes.Code
}

func (e *env) codeChecks() []codeCheck {
	node := e.s.caps.nodes[0].id
	unknown := fmt.Sprintf("%s-no-such-volume-%d", e.s.cfg.VolumeNamePrefix, time.Now().UnixNano())
	var checks []codeCheck
	if e.s.caps.unpublishFence {
		checks = append(checks,
			codeCheck{"fence without volume_id", func() error { return e.fenceCall("", node) }, []codes.Code{codes.InvalidArgument}},
			// The CSI spec: OK when the volume can be regarded as
			// unpublished, else NOT_FOUND.
			codeCheck{"fence of an unknown volume", func() error { return e.fenceCall(unknown, node) }, []codes.Code{codes.OK, codes.NotFound}},
		)
	}
	if e.s.caps.nodes[0].forceUnpublish {
		target := e.s.cfg.TargetDir + "/no-such-target"
		staging := e.s.cfg.StagingDir + "/no-such-staging"
		checks = append(checks,
			codeCheck{"forced NodeUnpublishVolume without volume_id", func() error { return e.forcedCall("", target, "") }, []codes.Code{codes.InvalidArgument}},
			codeCheck{"forced NodeUnpublishVolume without target_path", func() error { return e.forcedCall(unknown, "", "") }, []codes.Code{codes.InvalidArgument}},
			codeCheck{"forced NodeUnstageVolume without staging_target_path", func() error { return e.forcedCall(unknown, "", "-") }, []codes.Code{codes.InvalidArgument}},
			codeCheck{"forced NodeUnpublishVolume of an unknown volume", func() error { return e.forcedCall(unknown, target, "") }, []codes.Code{codes.OK, codes.NotFound}},
			codeCheck{"forced NodeUnstageVolume of an unknown volume", func() error { return e.forcedCall(unknown, "", staging) }, []codes.Code{codes.OK, codes.NotFound}},
		)
	}
	return checks
}

// fenceCall sends ControllerUnpublishVolume with fence = true.
func (e *env) fenceCall(volumeID, nodeID string) error {
	ctx, cancel := e.rpcContext()
	defer cancel()
	return e.unpublishCtx(ctx, volumeID, nodeID, true)
}

// forcedCall sends a forced NodeUnstageVolume when staging is set ("-"
// for an empty staging path), else a forced NodeUnpublishVolume, to the
// first node.
func (e *env) forcedCall(volumeID, target, staging string) error {
	ctx, cancel := e.rpcContext()
	defer cancel()
	a := &attachment{vol: volume{id: volumeID}, node: 0, nodeID: e.s.caps.nodes[0].id, target: target}
	if staging == "" {
		return e.nodeUnpublish(ctx, a, true)
	}
	if staging == "-" {
		staging = ""
	}
	node, err := e.node(0)
	if err != nil {
		return err
	}
	return forcedUnstage(ctx, node, volumeID, staging)
}

// forcedUnstage sends NodeUnstageVolume with force = true.
func forcedUnstage(ctx context.Context, node csi.NodeClient, volumeID, staging string) error {
	req := &csi.NodeUnstageVolumeRequest{VolumeId: volumeID, StagingTargetPath: staging}
	fence.SetForceUnstage(req, true)
	_, err := node.NodeUnstageVolume(ctx, req)
	return err
}
